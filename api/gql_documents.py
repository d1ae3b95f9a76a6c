"""Parsing, limits and validation of GraphQL documents, cached by query text.

Parsing and validation dominate the cost of a small query (measured: see docs/benchmarks.md), and clients send
the same few documents over and over, so the outcome (a prepared document, or the error to answer) is kept in an
LRU cache keyed by the query text. Limits, checked before validation:

- size: at most ``MAX_QUERY_BYTES`` (10 KB) of UTF-8;
- tokens: at most ``MAX_TOKENS`` (2,000), enforced while parsing;
- depth: at most ``MAX_DEPTH`` (10) nested fields, fragments expanded; introspection (``__schema``/``__type``)
  subtrees are not counted, so GraphiQL and schema tools keep working;
- aliases: at most ``MAX_ALIASES`` (20) in the document;
- fields, fragments expanded: at most ``MAX_FIELDS_PER_SET`` (200) in one selection set and ``MAX_FIELDS`` (500)
  in an operation or fragment (the full introspection query selects 229). Validation compares the fields of a
  selection set pairwise: 600 in one set took 0.5 s of CPU, 900 hit graphql-core's recursion limit.

Validation then runs in a worker thread (``api.news``): within these limits it can still take ~0.2 s.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from threading import Lock
from typing import Any

from graphql import (
    ArgumentNode,
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLSyntaxError,
    InlineFragmentNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    VariableDefinitionNode,
    VariableNode,
    parse,
    validate,
)
from graphql.validation.validate import ValidationAbortedError
from starlette.responses import JSONResponse

from api.cost import range_hint
from api.errors import ApiError
from api.gql_schema import SCHEMA

MAX_QUERY_BYTES = 10 * 1024
MAX_TOKENS = 2000
MAX_DEPTH = 10
MAX_ALIASES = 20
MAX_FIELDS_PER_SET = 200
MAX_FIELDS = 500
CACHE_SIZE = 1024

INTROSPECTION_ROOTS = frozenset({"__schema", "__type"})


@dataclass
class Prepared:
    document: DocumentNode
    fragments: dict[str, FragmentDefinitionNode]
    operations: list[OperationDefinitionNode]
    introspection: bool  # some operation asks for __schema / __type
    directives: bool  # @skip / @include somewhere: field collection then depends on the variables
    plans: dict[object, object] = field(default_factory=dict)  # field collections cached by api.gql_exec

    def operation(self, name: str | None) -> OperationDefinitionNode:
        if name:
            found = [op for op in self.operations if op.name is not None and op.name.value == name]
            if not found:
                raise ApiError(
                    400, "BAD_REQUEST", f"unknown operation {name!r}: operationName must name an operation in the document"
                )
            op = found[0]
        elif len(self.operations) != 1:
            raise ApiError(400, "BAD_REQUEST", "the document has several operations: pass operationName to pick one")
        else:
            op = self.operations[0]
        if op.operation != OperationType.QUERY:
            # graphql-core's validation accepts them; execution would fail: this API is read-only.
            raise ApiError(
                400, "GRAPHQL_VALIDATION_FAILED", f"this API is read-only: only queries are served, not a {op.operation.value}"
            )
        return op


@dataclass
class _Size:
    depth: int  # nested fields (an introspection root counts 1)
    fields: int  # fields the selection set holds itself, those of its fragments included
    total: int  # field selections in it and beneath it


class _Measure:
    """Sizes of a document's selection sets with fragments expanded, each fragment measured once: a few hundred
    tokens can spread a fragment 2^100 times over, and validation is quadratic in the fields of one selection set."""

    def __init__(self, fragments: dict[str, FragmentDefinitionNode]) -> None:
        self.fragments = fragments
        self.memo: dict[str, _Size] = {}
        self.widest = 0  # the most fields in one selection set

    def fragment(self, name: str, on_path: frozenset[str]) -> _Size:
        found = self.memo.get(name)
        if found is None:
            frag = self.fragments.get(name)
            if frag is None or name in on_path:  # unknown or cyclic: validation reports it
                return _Size(0, 0, 0)
            found = self.memo[name] = self.size(frag.selection_set, on_path | {name})
        return found

    def size(self, selection_set: SelectionSetNode, on_path: frozenset[str]) -> _Size:
        depth = fields = total = 0
        for sel in selection_set.selections:
            if isinstance(sel, FieldNode):
                fields += 1
                total += 1
                d = 1
                if sel.selection_set is not None:
                    sub = self.size(sel.selection_set, on_path)
                    total += sub.total
                    if sel.name.value not in INTROSPECTION_ROOTS:
                        d += sub.depth
                depth = max(depth, d)
                continue
            if isinstance(sel, InlineFragmentNode):
                sub = self.size(sel.selection_set, on_path)
            elif isinstance(sel, FragmentSpreadNode):
                sub = self.fragment(sel.name.value, on_path)
            else:  # pragma: no cover - no other selection kinds exist
                continue
            depth = max(depth, sub.depth)
            fields += sub.fields
            total += sub.total
        self.widest = max(self.widest, fields)
        return _Size(depth, fields, total)


def _check_size(document: DocumentNode, fragments: dict[str, FragmentDefinitionNode]) -> None:
    measure = _Measure(fragments)
    sizes = [measure.fragment(name, frozenset()) for name in fragments]
    for d in document.definitions:
        if isinstance(d, OperationDefinitionNode):
            size = measure.size(d.selection_set, frozenset())
            if size.depth > MAX_DEPTH:
                raise ApiError(
                    400, "QUERY_TOO_COMPLEX",
                    f"the query is nested more than {MAX_DEPTH} levels deep: ask for less nesting",
                )
            sizes.append(size)
    if measure.widest > MAX_FIELDS_PER_SET:
        raise ApiError(
            400, "QUERY_TOO_COMPLEX",
            f"a selection set holds more than {MAX_FIELDS_PER_SET} fields (fragments expanded): select each field "
            "once, or split the query",
        )
    if any(s.total > MAX_FIELDS for s in sizes):
        raise ApiError(
            400, "QUERY_TOO_COMPLEX",
            f"the query selects more than {MAX_FIELDS} fields (fragments expanded): select fewer, or split the query",
        )


def _count_aliases(document: DocumentNode) -> int:
    count = 0
    stack: list[SelectionSetNode] = [
        d.selection_set for d in document.definitions if isinstance(d, OperationDefinitionNode | FragmentDefinitionNode)
    ]
    while stack:
        for sel in stack.pop().selections:
            if isinstance(sel, FieldNode) and sel.alias is not None:
                count += 1
            sub = getattr(sel, "selection_set", None)
            if sub is not None:
                stack.append(sub)
    return count


@dataclass
class GraphQLRequestError(ApiError):
    """An ApiError that carries several GraphQL-formatted errors (with locations), each with extensions.code."""

    errors: list[dict[str, Any]] = field(default_factory=list)

    def graphql_response(self, extra_headers: dict[str, str] | None = None) -> JSONResponse:
        errors = self.errors or [{"message": self.message, "extensions": {"code": self.code}}]
        return JSONResponse(
            {"data": None, "errors": errors}, status_code=self.status, headers={**(extra_headers or {}), **self.headers}
        )


def _error(status: int, code: str, errors: list[GraphQLError]) -> GraphQLRequestError:
    formatted = [{**e.formatted, "extensions": {**(e.extensions or {}), "code": code}} for e in errors]
    return GraphQLRequestError(status, code, errors[0].message, errors=formatted)


def _copy(err: ApiError) -> ApiError:
    """A fresh exception for a cached outcome (re-raising one instance would grow its traceback forever)."""
    if isinstance(err, GraphQLRequestError):
        return GraphQLRequestError(err.status, err.code, err.message, dict(err.headers), errors=err.errors)
    return ApiError(err.status, err.code, err.message, dict(err.headers))


def _prepare(query: str) -> Prepared:
    try:
        document = parse(query, max_tokens=MAX_TOKENS)
    except GraphQLSyntaxError as exc:
        if "tokens" in exc.message and "Parsing aborted" in exc.message:
            raise ApiError(
                400, "QUERY_TOO_COMPLEX", f"the document has more than {MAX_TOKENS} tokens: send a smaller query"
            ) from None
        raise _error(400, "GRAPHQL_PARSE_FAILED", [exc]) from None
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    aliases = _count_aliases(document)
    if aliases > MAX_ALIASES:
        raise ApiError(400, "QUERY_TOO_COMPLEX", f"the document has {aliases} aliases; at most {MAX_ALIASES} are allowed")
    _check_size(document, fragments)
    errors = validate(SCHEMA, document)
    if any(isinstance(e, ValidationAbortedError) for e in errors):
        # graphql-core's bare "Validation aborted." (recursion) or its error limit: neither says what to do.
        errors = [e for e in errors if not isinstance(e, ValidationAbortedError)]
        if not errors:
            raise ApiError(
                400, "QUERY_TOO_COMPLEX",
                "the document is too complex to validate (fragments nested too deeply, or fields repeated too often): "
                "send a simpler query",
            )
        errors.append(GraphQLError(f"more than {len(errors)} validation errors; fix these and send the query again"))
    if errors:
        errors, sizes = _literal_hints(list(errors), document)
        # A size beyond 32 bits (`first: 100000000000`) is the mistake `first: 101` is: the same code.
        raise _error(400, "BAD_USER_INPUT" if sizes == len(errors) else "GRAPHQL_VALIDATION_FAILED", errors)
    introspection = any(
        isinstance(sel, FieldNode) and sel.name.value in INTROSPECTION_ROOTS
        for d in document.definitions
        if isinstance(d, OperationDefinitionNode | FragmentDefinitionNode)
        for sel in _all_selections(d.selection_set)
    )
    directives = _has_directives(document)
    return Prepared(document, fragments, operations, introspection, directives)


def _arguments(definitions: Any) -> Iterator[tuple[str, ArgumentNode]]:
    """``(field name, argument)`` of every field with arguments in ``definitions`` (operations and fragments)."""
    stack: list[SelectionSetNode] = [
        d.selection_set for d in definitions if isinstance(d, OperationDefinitionNode | FragmentDefinitionNode)
    ]
    while stack:
        for sel in stack.pop().selections:
            if isinstance(sel, FieldNode):
                for arg in sel.arguments or ():
                    yield sel.name.value, arg
            sub = getattr(sel, "selection_set", None)
            if sub is not None:
                stack.append(sub)


def _hinted(error: GraphQLError, hints: list[str]) -> GraphQLError:
    return GraphQLError("; ".join([error.message, *hints]), error.nodes, error.source, error.positions, error.path,
                        error.original_error, error.extensions)


def _literal_hints(errors: list[GraphQLError], document: DocumentNode) -> tuple[list[GraphQLError], int]:
    """graphql-core's errors about the value of a sized argument (`first: 100000000000`: "Int cannot represent non
    32-bit signed integer value") with what the argument allows appended, and how many of the errors are such
    out-of-range sizes."""
    at = {id(arg.value): (field, arg.name.value) for field, arg in _arguments(document.definitions)}
    out, sizes = [], 0
    for error in errors:
        node = error.nodes[0] if error.nodes and len(error.nodes) == 1 else None
        hint = range_hint(*at[id(node)]) if node is not None and id(node) in at else None
        if hint is None:
            out.append(error)
            continue
        out.append(_hinted(error, [hint]))
        sizes += "32-bit" in error.message
    return out, sizes


def variable_hints(errors: list[GraphQLError], operation: OperationDefinitionNode,
                   fragments: dict[str, FragmentDefinitionNode] | None = None) -> list[GraphQLError]:
    """Errors coercing a variable (``$n`` = 100000000000 used as `first`) with what the sized arguments that take
    it allow appended."""
    out = []
    for error in errors:
        node = error.nodes[0] if error.nodes else None
        hints: list[str] = []
        if isinstance(node, VariableDefinitionNode):
            name = node.variable.name.value
            for field, arg in _arguments([operation, *(fragments or {}).values()]):
                if isinstance(arg.value, VariableNode) and arg.value.name.value == name:
                    hint = range_hint(field, arg.name.value)
                    if hint is not None and hint not in hints:
                        hints.append(hint)
        out.append(_hinted(error, hints) if hints else error)
    return out


def _has_directives(document: DocumentNode) -> bool:
    stack: list[SelectionSetNode] = [
        d.selection_set for d in document.definitions if isinstance(d, OperationDefinitionNode | FragmentDefinitionNode)
    ]
    while stack:
        for sel in stack.pop().selections:
            if sel.directives:
                return True
            sub = getattr(sel, "selection_set", None)
            if sub is not None:
                stack.append(sub)
    return False


def _all_selections(selection_set: SelectionSetNode) -> list[object]:
    out: list[object] = []
    stack = [selection_set]
    while stack:
        for sel in stack.pop().selections:
            out.append(sel)
            if isinstance(sel, InlineFragmentNode):
                stack.append(sel.selection_set)
    return out


class DocumentCache:
    """LRU of ``query text -> Prepared | ApiError`` (errors are cached too: a broken client repeats itself)."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[str, Prepared | ApiError] = OrderedDict()
        self._lock = Lock()
        self.hits = 0
        self.misses = 0

    def lookup(self, query: str) -> Prepared | None:
        """The cached outcome for ``query`` (raised if an error), or None if it has to be prepared with ``get``."""
        if len(query) > MAX_QUERY_BYTES or len(query.encode()) > MAX_QUERY_BYTES:
            raise ApiError(
                400, "QUERY_TOO_LARGE", f"the query document is larger than {MAX_QUERY_BYTES // 1024} KB: send a smaller one"
            )
        with self._lock:
            found = self._items.get(query)
            if found is not None:
                self._items.move_to_end(query)
                self.hits += 1
        if isinstance(found, ApiError):
            raise _copy(found) from None
        return found

    def get(self, query: str) -> Prepared:
        found: Prepared | ApiError | None = self.lookup(query)
        if found is None:  # two threads may prepare the same query at once: both get the same outcome
            try:
                found = _prepare(query)
            except ApiError as exc:
                found = exc
            with self._lock:
                self.misses += 1
                self._items[query] = found
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
        if isinstance(found, ApiError):
            raise _copy(found) from None
        return found
