"""Enrichment: the asset registry table and the curated `articles` (sentiment, tickers, topics)."""


import dagster as dg

from pipeline.assets.ingest import POOL
from pipeline.automation import ON_CHANGE, WHEN_MISSING
from pipeline.resources import WarehouseResource
from warehouse.config import get_settings
from warehouse.crashpoints import crash_point


@dg.asset(
    group_name="enrich",
    pool=POOL,
    kinds={"duckdb"},
    automation_condition=WHEN_MISSING,
    description="The curated registry of crypto assets (symbols, names, aliases, kinds, renames).",
)
def crypto_assets(warehouse: WarehouseResource) -> dg.MaterializeResult:
    from models.tagging import get_tagger, load_registry
    from pipeline.enrich import load_crypto_assets

    registry = load_registry()
    with warehouse.connect() as con:
        n = load_crypto_assets(con, registry)
    return dg.MaterializeResult(metadata={"assets": n, "tagger_version": get_tagger().version})


@dg.asset(
    group_name="enrich",
    pool=POOL,
    deps=["raw_articles", crypto_assets],
    kinds={"duckdb", "pytorch"},
    automation_condition=ON_CHANGE,
    description=(
        "Every raw article with sentiment (fine-tuned MiniLM), tickers and topics. Incremental: only articles "
        "without a score for the current model_version, or tags for the current tagger_version, are processed."
    ),
)
def articles(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    from models.sentiment import OnFirstUse, article_text
    from models.tagging import get_tagger
    from pipeline.enrich import enrich_articles

    settings = get_settings()
    model = OnFirstUse(threads=settings.sentiment_threads or None, cache_dir=settings.models_dir)
    tagger = get_tagger()
    with warehouse.connect() as con:
        report = enrich_articles(con, model, article_text, tagger)
        rows = con.execute("SELECT sentiment, count(*) FROM articles GROUP BY ALL ORDER BY 1").fetchall()
        version = con.execute(VERSION_SQL).fetchall()[0]
    crash_point("articles:committed")
    context.log.info(f"scored {report.scored}, tagged {report.tagged} (model {report.model_version})")
    return dg.MaterializeResult(
        metadata={
            "new_or_changed": report.synced,
            "scored": report.scored,
            "tagged": report.tagged,
            "tickers_scored": report.tickers_scored,
            "model_version": report.model_version,
            "tagger_version": report.tagger_version,
            "rows": sum(n for _, n in rows),
            "by_sentiment": dg.MetadataValue.json({str(k): n for k, n in rows}),
        },
        # The same version when nothing was scored, tagged, added or removed: what follows runs on a change of it
        # (pipeline.automation.ON_CHANGE), not after every run of this asset (a new snapshot empties the API's
        # page cache).
        data_version=dg.DataVersion(":".join(str(v) for v in version)),
    )


# What any change of the articles moves: their count, the newest score and tags, the ticker rows and their scores,
# and their dates (a corrected date is copied without re-scoring: the followers re-bucket and re-derive for it).
VERSION_SQL = """
SELECT count(*), max(enriched_at), max(tagged_at), bit_xor(hash(id, published_at, date_inferred, published_offset)),
       (SELECT count(*) FROM article_tickers), (SELECT count(sentiment) FROM article_tickers)
FROM articles
"""
