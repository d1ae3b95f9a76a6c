"""Stories: articles reporting the same news grouped across sources, kept incrementally."""

import dagster as dg

from pipeline.assets.enrich import articles
from pipeline.assets.ingest import POOL
from pipeline.automation import ON_CHANGE
from pipeline.resources import WarehouseResource


@dg.asset(
    group_name="derive",
    pool=POOL,
    deps=[articles],
    kinds={"duckdb"},
    automation_condition=ON_CHANGE,
    description="Articles from different sources (and re-posts within one) that report the same news within 48 h, "
    "grouped into stories (`stories`, `story_articles`; embeddings kept in `article_embeddings`). Incremental: "
    "only new articles are embedded and compared, with the stories of the window around them. The warehouse is "
    "open only to read them, to store each batch of embeddings (kept if the run stops) and to group: not while "
    "the encoder runs.",
)
def stories(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    from pipeline.stories.refresh import refresh_stories_released

    # Not one connection for the whole step: a read-write connection locks every other process out of the file
    # (analysts' read-only ones too), and embedding a backlog takes minutes. The duckdb_writer pool still keeps
    # every other pipeline writer out until the step ends.
    report = refresh_stories_released(warehouse.connect)
    context.log.info(f"{report.new} new articles ({report.embedded} embedded) against {report.seeded} in the "
                     f"window: {report.touched} stories created or grown, {report.merged} merged into another, "
                     f"{report.resynced} recomputed for articles changed since, {report.stories} in all")
    return dg.MaterializeResult(metadata={"new": report.new, "embedded": report.embedded, "seeded": report.seeded,
                                          "touched": report.touched, "merged": report.merged,
                                          "resynced": report.resynced, "stories": report.stories})
