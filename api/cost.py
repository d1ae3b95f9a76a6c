"""The compute-unit (CU) cost of a GraphQL request, known before it runs from the document and the variables.

In the spirit of GitHub's GraphQL cost: what a request may return, not what it happens to return::

    cost = 0    when the operation selects nothing but `usage` (and `__typename`)
    cost = 1                                   base, once per request
         + sum over connection fields (`cryptoNews`, `predictionEvents`, `stories`) of the nodes requested:
               (`first` or `last`, default 10) x the nodes requested by the enclosing connections (nesting)
         + 1 per list field (`newsSources`, `newsTopics`, `tickers`) and per `__schema` / `__type`
         + for `assetSentiment`, the buckets its range may hold (``warehouse.trends.max_buckets``: the range's own
               count with `since` and `until`, or with `since` alone up to the snapshot's newest dated article (the
               interval's limit when no snapshot is loaded), else its default count)
         + for `trendingTickers` / `trendingTopics`, their `first` (default 10), as for a connection

Over a snapshot published by an older cryptowire, a root field it serves none of the data of (``stories``: an
empty list) costs nothing, and a request asking nothing else costs 0 (``api.older``).

Filters do not change the cost (``ids`` included: a page of ``first`` nodes costs ``first`` whatever selects them).
Examples: ``cryptoNews(first: 10)`` costs 11; ``cryptoNews(first: 100)`` plus ``predictionEvents(first: 20)``
costs 121; ``{ usage { plan } }`` costs 0. Charged per response key, as GraphQL answers: a field selected twice
under one name (directly or through fragments) is one field in the result and is charged once, while the same
field under two aliases is two and is charged twice. Fragments are expanded and ``@skip`` / ``@include`` honoured
with the request's variables.

Bad input that leaves the cost unknown is refused here, before anything is charged (400 ``BAD_USER_INPUT``):
``first``/``last`` outside 1..``MAX_PAGE`` (100), or both on one connection; an ``assetSentiment`` range whose
``since`` is after its ``until``, or that holds more buckets than its interval allows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    GraphQLObjectType,
    OperationDefinitionNode,
    get_named_type,
)
from graphql.execution.collect_fields import collect_fields, collect_sub_fields
from graphql.execution.values import get_argument_values

from api.errors import ApiError
from api.gql_schema import SCHEMA
from warehouse.read import DEFAULT_PAGE
from warehouse.trends import RangeError, SentimentRequest, max_buckets

MAX_PAGE = 100
MAX_MIN_SOURCES = 1000  # `stories(minSources:)`
FREE_ROOT_FIELDS = frozenset({"usage", "__typename"})


def range_hint(field_name: str, arg_name: str) -> str | None:
    """What an Int argument of a root field allows, for an error about its value (graphql-core's own, for a number
    beyond 32 bits, says only that); None for other arguments."""
    query_type = SCHEMA.query_type
    assert query_type is not None
    field = query_type.fields.get(field_name)
    if field is None or arg_name not in field.args:
        return None
    if arg_name in ("first", "last"):
        what = "connection" if "after" in field.args else "list"
        return f"`{arg_name}` on the `{field_name}` {what} must be from 1 to {MAX_PAGE}; omit it for the default of {DEFAULT_PAGE}"
    if field_name == "stories" and arg_name == "minSources":
        return f"`minSources` must be from 1 to {MAX_MIN_SOURCES}"
    return None


def page_size(field_name: str, args: dict[str, Any], paged: bool = True) -> int:
    """Nodes requested by one connection field (or, ``paged`` false, a list with a size but no cursor); raises a
    400 for sizes the API refuses."""
    what = "connection" if paged else "list"
    first, last = args.get("first"), args.get("last")
    if first is not None and last is not None:
        raise ApiError(
            400, "BAD_USER_INPUT",
            f"Passing both `first` and `last` to paginate the `{field_name}` {what} is not supported: pass one",
        )
    for name, value in (("first", first), ("last", last)):
        if value is None:
            continue
        if value > MAX_PAGE:
            cursor = ("after: pageInfo.endCursor" if name == "first" else "before: pageInfo.startCursor")
            advice = f"ask for at most {MAX_PAGE}" + (f" and page on with `{cursor}`" if paged else "")
            raise ApiError(
                400, "BAD_USER_INPUT", f"Requesting {value} records exceeds the `{name}` limit of {MAX_PAGE}: {advice}"
            )
        if value < 1:  # 0 would return an empty page with hasNextPage true and no cursor: a paging loop never ends
            raise ApiError(
                400, "BAD_USER_INPUT",
                f"`{name}` on the `{field_name}` {what} must be from 1 to {MAX_PAGE} (got {value}); "
                f"omit it for the default of {DEFAULT_PAGE}",
            )
    if first is not None:
        return int(first)
    if last is not None:
        return int(last)
    return DEFAULT_PAGE


def sentiment_request(args: dict[str, Any], anchor: datetime | None = None) -> tuple[SentimentRequest, int]:
    """``assetSentiment``'s arguments and the buckets it may return (its cost); raises a 400 for a range the API
    refuses (what to do is in the message)."""
    req = SentimentRequest(str(args["ticker"]), args.get("interval") or "DAY", args.get("since"), args.get("until"))
    try:
        return req, max_buckets(req, anchor)
    except RangeError as exc:
        raise ApiError(400, "BAD_USER_INPUT", str(exc)) from None


def _walk(
    parent: GraphQLObjectType, fields: dict[str, list[FieldNode]], fragments: dict[str, FragmentDefinitionNode],
    variables: dict[str, Any], multiplier: int, anchor: datetime | None,
) -> int:
    total = 0
    for nodes in fields.values():  # one entry per response key: repeats of a field are merged into one, as executed
        sel = nodes[0]  # validation made the merged ones the same field with the same arguments
        name = sel.name.value
        if name in ("__schema", "__type"):
            total += 1
            continue
        field = parent.fields.get(name)
        if field is None:  # __typename (validation rejected anything else)
            continue
        named = get_named_type(field.type)
        if name == "assetSentiment":
            total += multiplier * sentiment_request(get_argument_values(field, sel, variables), anchor)[1]
            continue
        if "first" in field.args or "last" in field.args:
            paged = "after" in field.args or "before" in field.args
            nodes_requested = multiplier * page_size(name, get_argument_values(field, sel, variables), paged)
            total += nodes_requested
            inner = nodes_requested
        else:
            inner = multiplier
            if parent is SCHEMA.query_type and name not in FREE_ROOT_FIELDS and not isinstance(named, GraphQLObjectType):
                total += 1  # a list of filter values
        if isinstance(named, GraphQLObjectType):
            sub = collect_sub_fields(SCHEMA, fragments, variables, named, nodes)
            total += _walk(named, sub, fragments, variables, inner, anchor)
    return total


def query_cost(
    operation: OperationDefinitionNode, fragments: dict[str, FragmentDefinitionNode], variables: dict[str, Any],
    anchor: datetime | None = None, free: frozenset[str] = frozenset(),
) -> int:
    """The CU cost of running ``operation`` (validated) with coerced ``variables``; ``anchor``: the serving
    snapshot's newest dated article, which ends an ``assetSentiment`` range given by ``since`` alone; ``free``:
    root fields that cost nothing, as ``usage`` (over a snapshot of an older cryptowire, those it serves none of
    the data of: ``api.older.free_roots``)."""
    query_type = SCHEMA.query_type
    assert query_type is not None
    # graphql-core's field collection, as the executors use: fragments, @skip / @include, repeats merged.
    fields = collect_fields(SCHEMA, fragments, variables, query_type, operation.selection_set)
    if free:
        fields = {key: nodes for key, nodes in fields.items() if nodes[0].name.value not in free}
    if all(nodes[0].name.value in FREE_ROOT_FIELDS for nodes in fields.values()):
        return 0
    return 1 + _walk(query_type, fields, fragments, variables, 1, anchor)
