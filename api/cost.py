"""The compute-unit (CU) cost of a GraphQL request, known before it runs from the document and the variables.

In the spirit of GitHub's GraphQL cost: what a request may return, not what it happens to return::

    cost = 0    when the operation selects nothing but `usage` (and `__typename`)
    cost = 1                                   base, once per request
         + sum over connection fields (`cryptoNews`, `predictionEvents`, `stories`) of the nodes requested:
               (`first` or `last`, default 10) x the nodes requested by the enclosing connections (nesting)
         + 1 per list field (`newsSources`, `newsTopics`, `tickers`) and per `__schema` / `__type`
         + for `assetSentiment`, the buckets its range may hold (``warehouse.trends.max_buckets``: the range's own
               count with `since` and `until`, the interval's limit with `since` alone, else its default count)
         + for `trendingTickers` / `trendingTopics`, their `first` (default 10), as for a connection

Examples: ``cryptoNews(first: 10)`` costs 11; ``cryptoNews(first: 100)`` plus ``predictionEvents(first: 20)``
costs 121; ``{ usage { plan } }`` costs 0; the same field under two aliases is charged twice. Fragments are
expanded and ``@skip`` / ``@include`` honoured with the request's variables.

Bad input that leaves the cost unknown is refused here, before anything is charged (400 ``BAD_USER_INPUT``):
``first``/``last`` outside 1..``MAX_PAGE`` (100), or both on one connection; an ``assetSentiment`` range whose
``since`` is after its ``until``, or that holds more buckets than its interval allows.
"""

from __future__ import annotations

from typing import Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLIncludeDirective,
    GraphQLObjectType,
    GraphQLSkipDirective,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    get_named_type,
)
from graphql.execution.values import get_argument_values, get_directive_values

from api.errors import ApiError
from api.gql_schema import SCHEMA
from warehouse.trends import RangeError, SentimentRequest, max_buckets

MAX_PAGE = 100
DEFAULT_PAGE = 10
FREE_ROOT_FIELDS = frozenset({"usage", "__typename"})


def page_size(field_name: str, args: dict[str, Any]) -> int:
    """Nodes requested by one connection field; raises a 400 for sizes the API refuses."""
    first, last = args.get("first"), args.get("last")
    if first is not None and last is not None:
        raise ApiError(
            400, "BAD_USER_INPUT",
            f"Passing both `first` and `last` to paginate the `{field_name}` connection is not supported: pass one",
        )
    for name, value in (("first", first), ("last", last)):
        if value is None:
            continue
        if value > MAX_PAGE:
            raise ApiError(400, "BAD_USER_INPUT", f"Requesting {value} records exceeds the `{name}` limit of {MAX_PAGE}")
        if value < 1:  # 0 would return an empty page with hasNextPage true and no cursor: a paging loop never ends
            raise ApiError(
                400, "BAD_USER_INPUT",
                f"`{name}` on the `{field_name}` connection must be from 1 to {MAX_PAGE} (got {value}); "
                f"omit it for the default of {DEFAULT_PAGE}",
            )
    if first is not None:
        return int(first)
    if last is not None:
        return int(last)
    return DEFAULT_PAGE


def sentiment_request(args: dict[str, Any]) -> SentimentRequest:
    """``assetSentiment``'s arguments; raises a 400 for a range the API refuses (what to do is in the message)."""
    req = SentimentRequest(str(args["ticker"]), args.get("interval") or "DAY", args.get("since"), args.get("until"))
    try:
        max_buckets(req)
    except RangeError as exc:
        raise ApiError(400, "BAD_USER_INPUT", str(exc)) from None
    return req


def _included(node: Any, variables: dict[str, Any]) -> bool:
    skip = get_directive_values(GraphQLSkipDirective, node, variables)
    if skip is not None and skip["if"] is True:
        return False
    include = get_directive_values(GraphQLIncludeDirective, node, variables)
    return not (include is not None and include["if"] is False)


def _walk(
    parent: GraphQLObjectType, selection_set: SelectionSetNode, fragments: dict[str, FragmentDefinitionNode],
    variables: dict[str, Any], multiplier: int, seen: frozenset[str],
) -> int:
    total = 0
    for sel in selection_set.selections:
        if not _included(sel, variables):
            continue
        if isinstance(sel, InlineFragmentNode):
            total += _walk(parent, sel.selection_set, fragments, variables, multiplier, seen)
            continue
        if isinstance(sel, FragmentSpreadNode):
            name = sel.name.value
            frag = fragments.get(name)
            if frag is not None and name not in seen:
                total += _walk(parent, frag.selection_set, fragments, variables, multiplier, seen | {name})
            continue
        if not isinstance(sel, FieldNode):  # pragma: no cover
            continue
        name = sel.name.value
        if name in ("__schema", "__type"):
            total += 1
            continue
        field = parent.fields.get(name)
        if field is None:  # __typename (validation rejected anything else)
            continue
        named = get_named_type(field.type)
        if name == "assetSentiment":
            total += multiplier * max_buckets(sentiment_request(get_argument_values(field, sel, variables)))
            continue
        if "first" in field.args or "last" in field.args:
            nodes = multiplier * page_size(name, get_argument_values(field, sel, variables))
            total += nodes
            inner = nodes
        else:
            inner = multiplier
            if parent is SCHEMA.query_type and name not in FREE_ROOT_FIELDS and not isinstance(named, GraphQLObjectType):
                total += 1  # a list of filter values
        if sel.selection_set is not None and isinstance(named, GraphQLObjectType):
            total += _walk(named, sel.selection_set, fragments, variables, inner, seen)
    return total


def _only_free(
    selection_set: SelectionSetNode, fragments: dict[str, FragmentDefinitionNode], variables: dict[str, Any]
) -> bool:
    for sel in selection_set.selections:
        if not _included(sel, variables):
            continue
        if isinstance(sel, FieldNode):
            if sel.name.value not in FREE_ROOT_FIELDS:
                return False
        elif isinstance(sel, InlineFragmentNode):
            if not _only_free(sel.selection_set, fragments, variables):
                return False
        elif isinstance(sel, FragmentSpreadNode):
            frag = fragments.get(sel.name.value)
            if frag is not None and not _only_free(frag.selection_set, fragments, variables):  # no cycles: validated
                return False
    return True


def query_cost(
    operation: OperationDefinitionNode, fragments: dict[str, FragmentDefinitionNode], variables: dict[str, Any]
) -> int:
    """The CU cost of running ``operation`` (validated) with coerced ``variables``."""
    query_type = SCHEMA.query_type
    assert query_type is not None
    total = _walk(query_type, operation.selection_set, fragments, variables, 1, frozenset())
    if _only_free(operation.selection_set, fragments, variables):
        return 0
    return 1 + total
