"""Snapshots published by an older cryptowire: what they lack, and how the fields that need it answer over them.

An upgraded data home serves its last snapshot until the new version's first publish, and that snapshot lacks the
tables and columns added since. For each such field the API either keeps the answer the docs promised older
snapshots (`stories` an empty list, `story` null, ...) and says so in the response's ``extensions.notes`` (the
`stories` connection, which then serves nothing, costs nothing), or, where that answer would read as real data,
refuses the field before anything is charged: `assetSentiment`'s ``buckets: []`` means "no dated article in the
range" (a quiet ticker, answered and charged so that pollers keep polling), which is not what a snapshot without
sentiment buckets knows. docs/api.md, "Older snapshots", lists them.

A gap is found once per snapshot, when it is opened (``snapshot_gaps``): the same schema checks the read side makes
(``warehouse.read.SnapshotReader``, ``warehouse.trends``). A current snapshot has none, and then nothing here runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb
from graphql import FieldNode, GraphQLObjectType, get_named_type
from graphql.execution.collect_fields import collect_sub_fields

from api.errors import ApiError
from api.gql_exec import Plan
from api.gql_schema import SCHEMA
from warehouse.read import has_column
from warehouse.trends import has_table

CODE = "SNAPSHOT_PREDATES_FIELD"  # the refusal's extensions.code, and each note's `code`
RETRY_AFTER = "60"  # a publish (the schedule's next run, or `cryptowire materialize`) ends it
MATERIALIZE = "run `cryptowire materialize` to publish a new one (the API moves to it by itself)"
QUERY_TYPE = SCHEMA.query_type
assert QUERY_TYPE is not None


@dataclass(frozen=True)
class Gap:
    """Something a snapshot of an older cryptowire lacks (``lacks``: in the words of a message) and, per schema
    coordinate (``Type.field``, or ``Type.field(argument:)``), what that field answers instead; None: refused."""

    lacks: str
    answers: dict[str, str | None]


GAPS: dict[str, Gap] = {
    "sentiment": Gap("has no sentiment buckets (the `sentiment` table came later)", {
        "Query.assetSentiment": None,
    }),
    "stories": Gap("has no stories", {
        "Query.stories": "`stories` answers an empty list, not charged",
        "News.story": "`story` is null for every article",
        "Query.cryptoNews(collapseStories:)": "`collapseStories` lists every article for itself",
    }),
    "ticker_sentiments": Gap("has no per-asset sentiment", {
        "News.tickerSentiments": "`tickerSentiments` is an empty list (`sentiment` is the article's own)",
    }),
    "date_inferred": Gap("does not tell undated articles apart", {
        "News.dateInferred": "`dateInferred` is false for every article",
        "Query.trendingTickers": "trending counts undated articles too, at the time they were fetched",
        "Query.trendingTopics": "trending counts undated articles too, at the time they were fetched",
    }),
    "event_changes": Gap("does not know when events changed", {
        "PredictionEvent.updatedAt": "`updatedAt` is null",
        "PredictionEvent.withdrawnAt": "`withdrawnAt` is null",
        "Query.predictionEvents(updatedSince:)": "`updatedSince` selects on `createdAt`: an event changed since it "
                                                 "was created is not found by the time of its change",
    }),
    "withdrawals": Gap("does not know withdrawn events", {
        "PredictionEvent.withdrawnReason": "`withdrawnReason` is null and no event's `status` is WITHDRAWN",
        "Query.predictionEvents(status:)": "`status: WITHDRAWN` matches no event",
    }),
}

# Arguments that use what a gap lacks: root field, argument, and whether the parsed arguments use it.
_ARGUMENTS: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
    ("cryptoNews", "collapseStories", lambda parsed: bool(parsed[1].collapse_stories)),
    ("predictionEvents", "updatedSince", lambda parsed: parsed[1].updated_since is not None),
    ("predictionEvents", "status", lambda parsed: parsed[1].status == "WITHDRAWN"),
)


def snapshot_gaps(con: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """The ``GAPS`` an open snapshot (a single file, or a set's views) has: empty for a current one."""
    checks = {
        "sentiment": lambda: has_table(con, "sentiment"),
        "stories": lambda: has_column(con, "news", "story_id"),
        "ticker_sentiments": lambda: has_column(con, "news", "ticker_sentiments"),
        "date_inferred": lambda: has_column(con, "news", "date_inferred"),
        "event_changes": lambda: has_column(con, "events", "updated_at"),
        "withdrawals": lambda: has_column(con, "events", "withdrawn_reason"),
    }
    return frozenset(name for name, has in checks.items() if not has())


def free_roots(gaps: frozenset[str]) -> frozenset[str]:
    """Root fields that cost nothing over a snapshot with ``gaps``: they serve none of their data."""
    return frozenset({"stories"}) if "stories" in gaps else frozenset()


def _used(plan: Plan) -> list[str]:
    """The schema coordinates the plan's operation asks for, in the order they are met (fields as executed:
    fragments expanded, ``@skip`` / ``@include`` honoured; arguments as they were parsed)."""
    prepared, variables = plan.prepared, plan.variables
    seen: dict[str, None] = {}

    def walk(parent: GraphQLObjectType, nodes: list[FieldNode]) -> None:
        for sub in collect_sub_fields(SCHEMA, prepared.fragments, variables, parent, nodes).values():
            name = sub[0].name.value
            field = parent.fields.get(name)
            if field is None:  # __typename
                continue
            seen[f"{parent.name}.{name}"] = None
            named = get_named_type(field.type)
            if isinstance(named, GraphQLObjectType):
                walk(named, sub)

    for planned in plan.fields:
        field = QUERY_TYPE.fields.get(planned.name)
        if field is None:  # __typename, __schema, __type
            continue
        seen[f"Query.{planned.name}"] = None
        for root, argument, uses in _ARGUMENTS:
            if planned.name == root and planned.parsed is not None and uses(planned.parsed):
                seen[f"Query.{root}({argument}:)"] = None
        named = get_named_type(field.type)
        if isinstance(named, GraphQLObjectType):
            walk(named, planned.nodes)
    return list(seen)


def _affected(plan: Plan, gaps: frozenset[str]) -> list[tuple[str, Gap, str | None]]:
    """``(coordinate, gap, answer)`` for each coordinate the plan uses that one of ``gaps`` changes."""
    changed = {coordinate: (GAPS[name], answer) for name in sorted(gaps)
               for coordinate, answer in GAPS[name].answers.items()}
    return [(c, *changed[c]) for c in _used(plan) if c in changed]


def _message(snapshot: str, gap: Gap, tail: str) -> str:
    return f"the serving snapshot ({snapshot}) was published by an older cryptowire and {gap.lacks}: {tail}"


def refuse(plan: Plan, snapshot: str, gaps: frozenset[str]) -> None:
    """Raise the 503 for a field the snapshot cannot answer at all (before anything is charged)."""
    for coordinate, gap, answer in _affected(plan, gaps):
        if answer is None:
            field = coordinate.split(".", 1)[1]
            raise ApiError(503, CODE, _message(snapshot, gap, (
                f"`{field}` cannot be answered from it; {MATERIALIZE}. Nothing was charged; the rest of the query "
                f"is answered when asked without `{field}`")), {"Retry-After": RETRY_AFTER})


def notes(plan: Plan, snapshot: str, gaps: frozenset[str]) -> list[dict[str, str]]:
    """``extensions.notes``: one per field (or argument) the request used whose answer the snapshot's age changes."""
    return [{"code": CODE, "field": coordinate, "message": _message(snapshot, gap, f"{answer}; {MATERIALIZE}")}
            for coordinate, gap, answer in _affected(plan, gaps) if answer is not None]
