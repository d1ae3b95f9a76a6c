"""Running a prepared GraphQL operation: argument planning, root resolvers, and a fast executor.

Three steps, so that bad input is refused before anything is charged:

1. ``plan_operation`` coerces the variables (graphql-core), collects the root fields (fragments, ``@skip`` /
   ``@include``) and parses their arguments into read-side requests: a bad cursor or date here is a 400
   ``BAD_CURSOR``, a bad argument a 400 ``BAD_USER_INPUT``.
2. The caller (which checked the key first) computes the cost (``api.cost``) and reserves it.
3. ``execute_plan`` runs the root resolvers against the snapshot and shapes the result.

graphql-core's own ``execute`` spends most of its time in per-field bookkeeping (about 1.6 ms for a page of 20
news items here, against well under 0.1 ms for building the same dicts directly; see docs/benchmarks.md). Our
resolvers hand out values already serialised (ISO strings, enum names), so the fast executor only selects and
renames fields: it follows the same field collection as graphql-core (``collect_fields`` / ``collect_sub_fields``)
and resolves a field from a dict key or an attribute, like graphql-core's default resolver. Anything unusual — an
introspection query, a resolver error, a null in a non-null field — is handed to graphql-core's ``execute`` with
the same resolvers, which is the reference (a test runs both on the same queries and compares).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from graphql import (
    ExecutionResult,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLError,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    OperationDefinitionNode,
    execute,
)
from graphql.execution.collect_fields import collect_fields, collect_sub_fields
from graphql.execution.values import get_argument_values, get_variable_values

from api.cost import MAX_MIN_SOURCES, sentiment_request
from api.errors import ApiError
from api.gql_documents import GraphQLRequestError, Prepared, variable_hints
from api.gql_schema import SCHEMA
from api.lookup import parse_ids, with_ids
from warehouse import trends
from warehouse.cursors import CursorError, decode_event_cursor, decode_news_cursor, decode_story_cursor
from warehouse.read import CacheMiss, EventFilters, NewsFilters, PageRequest, SnapshotReader, StoryFilters

log = logging.getLogger("cryptowire.api")

MAX_SEARCH = 200
MAX_FILTER_VALUES = 50
QUERY_TYPE = SCHEMA.query_type
assert QUERY_TYPE is not None


@dataclass
class Context:
    reader: SnapshotReader | None
    usage: dict[str, Any] | None = None
    now: datetime = field(default_factory=lambda: datetime.now(UTC).replace(tzinfo=None))
    # What the answer's data cannot say (a ticker renamed within the range, a short trending baseline): the
    # response's ``extensions.notes``, as ``api.older`` notes what an older snapshot lacks.
    notes: list[dict[str, str]] = field(default_factory=list)


RENAMED = "TICKER_RENAMED"  # a note's code: the range reaches across a rename of the ticker's asset
SHORT_BASELINE = "SHORT_BASELINE"  # a note's code: trending's baseline has less data than its full length


def _note(ctx: Context, field_name: str, code: str, messages: list[str] | None) -> None:
    for message in messages or []:
        note = {"code": code, "field": f"Query.{field_name}", "message": message}
        if note not in ctx.notes:  # the same field under two aliases: one note
            ctx.notes.append(note)


# --------------------------------------------------------------------------------------------- arguments


def _bad(message: str) -> ApiError:
    return ApiError(400, "BAD_USER_INPUT", message)


def _cursor(decode: Callable[[str], Any], value: str | None, arg: str) -> Any:
    if value is None:
        return None
    try:
        return decode(value)
    except CursorError as exc:
        raise ApiError(400, "BAD_CURSOR", f"`{arg}`: {exc}") from None


def _values(args: dict[str, Any], name: str) -> tuple[str, ...] | None:
    values = args.get(name)
    if values is None:
        return None
    if len(values) > MAX_FILTER_VALUES:
        raise _bad(f"`{name}` lists {len(values)} values; at most {MAX_FILTER_VALUES} are allowed")
    return tuple(values)


def _ordered(args: dict[str, Any], low: str, high: str) -> None:
    """A range whose start is after its end can match nothing: say so instead of answering an empty page."""
    lo, hi = args.get(low), args.get(high)
    if lo is not None and hi is not None and lo.at >= hi.upper_exclusive():

        def shown(i: Any) -> str:
            return i.at.date().isoformat() if i.date_only else i.at.isoformat() + "Z"

        raise _bad(f"`{low}` ({shown(lo)}) is after `{high}` ({shown(hi)}): swap them, or leave one out")


def _page(args: dict[str, Any], decode: Callable[[str], Any]) -> PageRequest:
    req = PageRequest(
        first=args.get("first"), last=args.get("last"),
        after=_cursor(decode, args.get("after"), "after"), before=_cursor(decode, args.get("before"), "before"),
    )
    _window(args, req)
    return req


def _window(args: dict[str, Any], req: PageRequest) -> None:
    """`after` takes items strictly older than its instant and `before` items strictly newer: given as dates or
    timestamps with `after` not later than `before`, the window is empty by construction, as a reversed
    `since`/`until`: say so instead of answering an empty page. A news or story cursor is opaque (a key, not a
    date): a pair holding one is left alone. An event cursor is its `createdAt` (documented), so a pair of event
    cursors is a pair of timestamps."""
    after, before = req.after, req.before
    if after is None or before is None:
        return
    if getattr(after, "id", None) is not None or getattr(before, "id", None) is not None:
        return  # a news or story cursor
    if after.at > before.at:
        return
    a, b = json.dumps(args["after"]), json.dumps(args["before"])
    what = (f"`after` ({a}) is not later than `before` ({b}): `after` takes items strictly older than it and "
            "`before` items strictly newer, so no item can match")
    if after.at == before.at:  # swapped, they would be the same instant again
        raise _bad(f"{what}; leave one out, or pass two different instants (the newer one as `after`)")
    raise _bad(f"{what}; to list the items in between, swap them (after: {b}, before: {a}), or leave one out")


def parse_news_args(args: dict[str, Any]) -> tuple[PageRequest, NewsFilters]:
    search = args.get("search")
    if search is not None and len(search) > MAX_SEARCH:
        raise _bad(f"`search` is {len(search)} characters long; at most {MAX_SEARCH} are allowed")
    _ordered(args, "since", "until")
    ids = parse_ids(args, "cryptoNews")
    if ids is not None and args.get("collapseStories"):
        raise _bad("`ids` names the articles to list and `collapseStories` would leave some of them out (those "
                   "that are not their story's earliest): leave one out")
    filters = NewsFilters(
        tickers=_values(args, "tickers"), topics=_values(args, "topics"), sentiment=args.get("sentiment"),
        sources=_values(args, "sources"), since=args.get("since"), until=args.get("until"), search=search or None,
        collapse_stories=bool(args.get("collapseStories")),
    )
    return _page(args, decode_news_cursor), with_ids(filters, ids)


def parse_story_args(args: dict[str, Any]) -> tuple[PageRequest, StoryFilters]:
    min_sources = args.get("minSources")
    if min_sources is not None and not 1 <= min_sources <= MAX_MIN_SOURCES:
        raise _bad(f"`minSources` must be from 1 to {MAX_MIN_SOURCES} (got {min_sources})")
    _ordered(args, "since", "until")
    filters = StoryFilters(
        tickers=_values(args, "tickers"), topics=_values(args, "topics"), since=args.get("since"),
        until=args.get("until"), min_sources=min_sources,
    )
    return _page(args, decode_story_cursor), with_ids(filters, parse_ids(args, "stories"))


def parse_event_args(args: dict[str, Any]) -> tuple[PageRequest, EventFilters]:
    _ordered(args, "dateFrom", "dateTo")
    filters = EventFilters(
        tickers=_values(args, "tickers"), tags=_values(args, "tags"), status=args.get("status"),
        date_from=args.get("dateFrom"), date_to=args.get("dateTo"), updated_since=args.get("updatedSince"),
    )
    return _page(args, decode_event_cursor), with_ids(filters, parse_ids(args, "predictionEvents"))


def parse_sentiment_args(args: dict[str, Any]) -> trends.SentimentRequest:
    ticker = str(args.get("ticker") or "").strip()
    problem = trends.ticker_problem(ticker)
    if problem is not None:
        raise _bad(f"`ticker` {problem}; the `tickers` field lists those in the news")
    return sentiment_request({**args, "ticker": ticker.upper()})[0]


def parse_trending_args(args: dict[str, Any]) -> tuple[str, int]:
    return args.get("window") or "DAY", int(args.get("first") or 10)  # `first` was checked with the cost


# --------------------------------------------------------------------------------------------- resolvers


class Edge:
    __slots__ = ("node", "_cursor")

    def __init__(self, node: dict[str, Any], cursor: Callable[[dict[str, Any]], str]) -> None:
        self.node = node
        self._cursor = cursor

    @property
    def cursor(self) -> str:
        return self._cursor(self.node)


def _connection(page: Any, cursor: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    edges = [Edge(row, cursor) for row in page.rows]
    return {
        "edges": edges,
        "pageInfo": {
            "hasNextPage": page.has_next,
            "hasPreviousPage": page.has_previous,
            "startCursor": edges[0].cursor if edges else None,
            "endCursor": edges[-1].cursor if edges else None,
        },
    }


def _event_cursor(row: dict[str, Any]) -> str:
    return row["createdAt"]


def run_news(ctx: Context, parsed: tuple[PageRequest, NewsFilters], need_page_info: bool = True) -> dict[str, Any]:
    assert ctx.reader is not None
    req, filters = parsed
    page = ctx.reader.news_page(req, filters, need_next=need_page_info, need_previous=need_page_info)
    return _connection(page, ctx.reader.news_cursor)


def run_stories(ctx: Context, parsed: tuple[PageRequest, StoryFilters], need_page_info: bool = True) -> dict[str, Any]:
    assert ctx.reader is not None
    req, filters = parsed
    page = ctx.reader.stories_page(req, filters, need_next=need_page_info, need_previous=need_page_info)
    return _connection(page, ctx.reader.news_cursor)


def run_events(ctx: Context, parsed: tuple[PageRequest, EventFilters], need_page_info: bool = True) -> dict[str, Any]:
    assert ctx.reader is not None
    req, filters = parsed
    page = ctx.reader.events_page(req, filters, now=ctx.now, need_next=need_page_info,
                                             need_previous=need_page_info)
    return _connection(page, _event_cursor)


def _list(kind: str) -> Callable[..., list[str]]:
    def run(ctx: Context, _parsed: Any, _need: bool = True) -> list[str]:
        assert ctx.reader is not None
        return ctx.reader.filter_values(kind)

    return run


def _known_ticker(reader: SnapshotReader, req: trends.SentimentRequest) -> None:
    """A ticker no article (nor event) of the snapshot names is most likely a typo: say so, free of charge, rather
    than answer the empty series of a real but quiet ticker (which a poller must keep getting). A name (bitcoin), or
    a symbol of before or after a rename whose other symbol the news has, is said so."""
    if not trends.known_ticker(reader.con, req.ticker, reader.facts):
        hints = trends.unknown_ticker_hints(reader.con, req.ticker, reader.facts)
        advice = "; ".join(hints) if hints else "check the symbol"
        raise _bad(f"no article in this snapshot mentions the ticker {req.ticker!r}: {advice}; the "
                   "`tickers` field lists every ticker the news (or an event) names")


def check_with_snapshot(plan: Plan, reader: SnapshotReader) -> None:
    """The arguments only the snapshot can judge, checked before the charge: found wrong while executing, they
    failed the request after its other root fields had run (twice: the fast executor then falls back), all refunded."""
    for planned in plan.fields:
        if planned.name == "assetSentiment":
            _known_ticker(reader, planned.parsed)


def run_sentiment(ctx: Context, req: trends.SentimentRequest, _need: bool = True) -> dict[str, Any]:
    reader = ctx.reader
    assert reader is not None

    def series() -> dict[str, Any]:
        _known_ticker(reader, req)  # checked before the charge too (``check_with_snapshot``); cached per snapshot
        found = trends.sentiment_series(reader.con, req, reader.facts)
        # Buckets stay the ticker's own: a range across a rename of its asset is noted, not merged.
        return {**found, "_notes": trends.series_hints(reader.con, found, reader.facts)}

    try:
        answer = reader.cache.get(("assetSentiment", req), series, reader.cache_only)
    except trends.RangeError as exc:  # `since` alone, and the newest article is too far from it
        raise _bad(str(exc)) from None
    _note(ctx, "assetSentiment", RENAMED, answer.get("_notes"))
    return answer


def _trending(kind: str) -> Callable[..., dict[str, Any]]:
    def run(ctx: Context, parsed: tuple[str, int], _need: bool = True) -> dict[str, Any]:
        reader = ctx.reader
        assert reader is not None
        window, first = parsed
        answer = reader.cache.get(("trending", kind, window, first),
                                  lambda: trends.trending(reader.con, kind, window, first, reader.facts),
                                  reader.cache_only)
        _note(ctx, "trendingTickers" if kind == "tickers" else "trendingTopics", SHORT_BASELINE, answer.get("_notes"))
        return answer

    return run


def run_usage(ctx: Context, _parsed: Any, _need: bool = True) -> dict[str, Any]:
    return ctx.usage or {}


@dataclass(frozen=True)
class RootField:
    run: Callable[..., Any]
    parse: Callable[[dict[str, Any]], Any] = lambda args: None
    needs_snapshot: bool = True


ROOTS: dict[str, RootField] = {
    "cryptoNews": RootField(run_news, parse_news_args),
    "predictionEvents": RootField(run_events, parse_event_args),
    "stories": RootField(run_stories, parse_story_args),
    "assetSentiment": RootField(run_sentiment, parse_sentiment_args),
    "trendingTickers": RootField(_trending("tickers"), parse_trending_args),
    "trendingTopics": RootField(_trending("topics"), parse_trending_args),
    "newsSources": RootField(_list("newsSources")),
    "newsTopics": RootField(_list("newsTopics")),
    "tickers": RootField(_list("tickers")),
    "usage": RootField(run_usage, needs_snapshot=False),
}


def _graphql_core_resolver(name: str) -> Callable[..., Any]:
    root = ROOTS[name]

    def resolve(_source: Any, info: Any, **args: Any) -> Any:
        return root.run(info.context, root.parse(args))

    return resolve


# A private copy of the schema's root type with resolvers, for graphql-core's execute (the reference path).
for _name, _field in QUERY_TYPE.fields.items():
    _field.resolve = _graphql_core_resolver(_name)


def usage_value(usage: dict[str, Any]) -> dict[str, Any]:
    """The access layer's usage dict in the schema's shape (datetimes as ISO strings)."""
    out = {k: usage.get(k) for k in ("plan", "cuUsedToday", "cuRemainingToday", "cuLimit", "requestsPerSecond")}
    reset = usage.get("resetAt")
    if isinstance(reset, datetime):
        reset = (reset.astimezone(UTC) if reset.tzinfo else reset).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    out["resetAt"] = reset
    out["plan"] = str(out["plan"] or "")
    return out


# --------------------------------------------------------------------------------------------- planning


@dataclass
class PlannedField:
    key: str
    name: str
    nodes: list[FieldNode]
    parsed: Any
    need_page_info: bool


@dataclass
class Plan:
    prepared: Prepared
    operation: OperationDefinitionNode
    variables: dict[str, Any]  # coerced
    raw_variables: dict[str, Any]  # as sent (graphql-core's execute coerces them itself)
    fields: list[PlannedField]

    @property
    def checks_snapshot(self) -> bool:
        """Whether an argument must be checked against the snapshot before the charge (``check_with_snapshot``)."""
        return any(f.name == "assetSentiment" for f in self.fields)

    @property
    def needs_snapshot(self) -> bool:
        return any(f.name in ROOTS and ROOTS[f.name].needs_snapshot for f in self.fields)

    @property
    def needs_usage(self) -> bool:
        return any(f.name == "usage" for f in self.fields)


def coerce_variables(
    operation: OperationDefinitionNode, raw: dict[str, Any] | None,
    fragments: dict[str, FragmentDefinitionNode] | None = None,
) -> dict[str, Any]:
    """The variables coerced to their types; a 400 BAD_USER_INPUT for values they cannot take (a variable a sized
    argument takes, `first: $n`, is told what that argument allows: ``fragments`` are searched for its uses too)."""
    coerced = get_variable_values(SCHEMA, operation.variable_definitions or (), raw or {}, max_errors=10)
    if isinstance(coerced, list):
        coerced = variable_hints(coerced, operation, fragments)  # a bad `first: $n` also says what it allows
        formatted = [{**e.formatted, "extensions": {"code": "BAD_USER_INPUT"}} for e in coerced]
        raise GraphQLRequestError(400, "BAD_USER_INPUT", coerced[0].message, errors=formatted)
    return coerced


def plan_operation(
    prepared: Prepared, operation: OperationDefinitionNode, variables: dict[str, Any], raw_variables: dict[str, Any]
) -> Plan:
    """Root fields with parsed arguments; raises ApiError (400) for bad arguments."""
    collected = collect_fields(SCHEMA, prepared.fragments, variables, QUERY_TYPE, operation.selection_set)
    planned = []
    for key, nodes in collected.items():
        name = nodes[0].name.value
        root = ROOTS.get(name)
        if root is None:  # __typename, __schema, __type
            planned.append(PlannedField(key, name, nodes, None, False))
            continue
        args = get_argument_values(QUERY_TYPE.fields[name], nodes[0], variables)
        need = False
        if name in ("cryptoNews", "predictionEvents", "stories"):
            conn_type = QUERY_TYPE.fields[name].type.of_type
            sub = collect_sub_fields(SCHEMA, prepared.fragments, variables, conn_type, nodes)
            need = any(n[0].name.value == "pageInfo" for n in sub.values())
        planned.append(PlannedField(key, name, nodes, root.parse(args), need))
    return Plan(prepared, operation, variables, raw_variables, planned)


# --------------------------------------------------------------------------------------------- execution


class _Fallback(Exception):
    """The fast path met something it leaves to graphql-core."""


# How the fast executor completes a field.
_TYPENAME, _LEAF, _LEAF_LIST, _OTHER = range(4)
CompiledField = tuple[str, str, int, bool, Any, list[FieldNode]]


def _is_leaf(t: Any) -> bool:
    return not isinstance(t, GraphQLObjectType | GraphQLList | GraphQLNonNull)


_SURPRISES: set[str] = set()  # exception types already logged: once each per process, not once per request


def _surprise(exc: Exception) -> None:
    """A fast-executor failure that is not the client's: a bug the reference executor hides by answering (the
    request runs its queries twice), so it is logged once per exception type, at WARNING, with its traceback."""
    name = type(exc).__name__
    if name not in _SURPRISES:
        _SURPRISES.add(name)
        log.warning("fast executor fell back on %s (logged once per type): %s", name, exc, exc_info=exc)


class FastExecutor:
    def __init__(self, plan: Plan, ctx: Context) -> None:
        self.plan = plan
        self.ctx = ctx
        # Field collection depends on variables only through directives: without any, share it across requests.
        prepared = plan.prepared
        self._memo: dict[Any, list[CompiledField]] = prepared.plans if not prepared.directives else {}  # type: ignore[assignment]

    def _compiled(self, otype: GraphQLObjectType, nodes: list[FieldNode]) -> list[CompiledField]:
        key = (otype.name, *map(id, nodes))
        found = self._memo.get(key)
        if found is None:
            found = []
            sub = collect_sub_fields(SCHEMA, self.plan.prepared.fragments, self.plan.variables, otype, nodes)
            for rkey, fnodes in sub.items():
                name = fnodes[0].name.value
                if name == "__typename":
                    found.append((rkey, name, _TYPENAME, False, None, fnodes))
                    continue
                ftype = otype.fields[name].type
                nonnull = isinstance(ftype, GraphQLNonNull)
                inner = ftype.of_type if nonnull else ftype
                if _is_leaf(inner):
                    kind = _LEAF
                elif isinstance(inner, GraphQLList) and isinstance(inner.of_type, GraphQLNonNull) and _is_leaf(
                    inner.of_type.of_type
                ):
                    kind = _LEAF_LIST
                else:
                    kind = _OTHER
                found.append((rkey, name, kind, nonnull, ftype, fnodes))
            self._memo[key] = found
        return found

    def _complete(self, rtype: Any, nodes: list[FieldNode], value: Any) -> Any:
        if isinstance(rtype, GraphQLNonNull):
            if value is None:
                raise _Fallback("null in a non-null field")
            rtype = rtype.of_type
        elif value is None:
            return None
        if isinstance(rtype, GraphQLList):
            inner = rtype.of_type
            return [self._complete(inner, nodes, item) for item in value]
        if isinstance(rtype, GraphQLObjectType):
            return self._object(rtype, nodes, value)
        return value  # leaf: the read side hands out serialised values

    def _object(self, otype: GraphQLObjectType, nodes: list[FieldNode], obj: Any) -> dict[str, Any]:
        out = {}
        is_dict = type(obj) is dict
        for rkey, name, kind, nonnull, ftype, fnodes in self._compiled(otype, nodes):
            if kind == _TYPENAME:
                out[rkey] = otype.name
                continue
            value = obj.get(name) if is_dict else getattr(obj, name)
            if kind == _LEAF:
                if value is None and nonnull:
                    raise _Fallback("null in a non-null field")
                out[rkey] = value
            elif kind == _LEAF_LIST:
                if value is None:
                    if nonnull:
                        raise _Fallback("null in a non-null list")
                    out[rkey] = None
                elif None in value:
                    raise _Fallback("null in a list of non-null leaves")
                else:
                    out[rkey] = list(value)
            else:
                out[rkey] = self._complete(ftype, fnodes, value)
        return out

    def run(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for f in self.plan.fields:
            if f.name == "__typename":
                data[f.key] = QUERY_TYPE.name
                continue
            root = ROOTS[f.name]
            if f.name == "usage":
                value = usage_value(self.ctx.usage or {})
            else:
                value = root.run(self.ctx, f.parsed, f.need_page_info)
            data[f.key] = self._complete(QUERY_TYPE.fields[f.name].type, f.nodes, value)
        return data


def _format_error(error: GraphQLError) -> dict[str, Any]:
    original = error.original_error
    out = error.formatted
    if isinstance(original, ApiError):
        out["message"] = original.message
        out["extensions"] = {"code": original.code}
    elif original is not None:
        log.error("resolver failed at %s", error.path, exc_info=original)
        out["message"] = "internal error while resolving this field; it was logged"
        out["extensions"] = {"code": "INTERNAL_SERVER_ERROR"}
    else:
        out["extensions"] = {**(error.extensions or {}), "code": (error.extensions or {}).get("code", "INTERNAL_SERVER_ERROR")}
    return out


@dataclass
class Outcome:
    data: dict[str, Any] | None
    errors: list[dict[str, Any]]
    notes: list[dict[str, str]] = field(default_factory=list)  # for ``extensions.notes`` (``Context.notes``)

    @property
    def bad_input(self) -> bool:
        """Every error was the caller's fault (nothing is charged then)."""
        return bool(self.errors) and all(
            e.get("extensions", {}).get("code") in ("BAD_CURSOR", "BAD_USER_INPUT") for e in self.errors
        )


def execute_reference(plan: Plan, ctx: Context) -> Outcome:
    """graphql-core's executor with the same resolvers."""
    if ctx.usage is not None:
        ctx.usage = usage_value(ctx.usage)
    ctx.notes.clear()  # a fast run that fell back may have noted some already
    result = execute(SCHEMA, plan.prepared.document, context_value=ctx, variable_values=plan.raw_variables,
                     operation_name=plan.operation.name.value if plan.operation.name else None)
    assert isinstance(result, ExecutionResult)
    return Outcome(result.data, [_format_error(e) for e in result.errors or []], list(ctx.notes))


def execute_plan(plan: Plan, ctx: Context, fast: bool = True) -> Outcome:
    """Run the plan; falls back to graphql-core for introspection and for anything that goes wrong."""
    if fast and not plan.prepared.introspection:
        try:
            return Outcome(FastExecutor(plan, ctx).run(), [], list(ctx.notes))
        except CacheMiss:
            raise
        except Exception as exc:  # any surprise: let the reference executor produce spec-shaped errors
            if not isinstance(exc, _Fallback | ApiError | GraphQLError | ValueError):  # those are the client's
                _surprise(exc)
    return execute_reference(plan, ctx)
