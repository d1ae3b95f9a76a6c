"""schemathesis in GraphQL mode against the running server: generated queries never get a 500, and every error
carries extensions.code. Bounded: a few hundred examples in all (400: most generated queries are refused for their arguments, and at least 50 must reach execution)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.graphql import nodes

from api.access import StaticKeys
from api.app import create_app
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, build, make_articles, make_events
from warehouse.config import Settings

KEY = "fuzz-key"

# DateTime is ours: give the fuzzer good and bad values alike.
schemathesis.graphql.scalar(
    "DateTime",
    st.one_of(
        st.dates().map(lambda d: nodes.String(d.isoformat())),
        st.datetimes().map(lambda d: nodes.String(d.isoformat() + "Z")),
        st.text(max_size=30).map(nodes.String),
    ),
)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    home = tmp_path_factory.mktemp("fuzz") / "home"
    build(home, Data(make_articles(150, 60), make_events(30)))
    with ApiServer(create_app(Settings(home=home), access=StaticKeys([KEY]))) as srv:
        yield srv


@pytest.fixture(scope="module")
def graphql_schema(fuzz_server: ApiServer) -> schemathesis.graphql.GraphQLSchema:  # type: ignore[name-defined]
    return schemathesis.graphql.from_url(fuzz_server.url(f"/crypto-news/{KEY}"))


def check(case: schemathesis.Case, statuses: dict[int, int]) -> None:
    response = case.call(timeout=30)
    statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
    assert response.status_code < 500, response.text
    body = response.json()
    assert "data" in body or "errors" in body
    for error in body.get("errors") or []:
        assert error["extensions"]["code"], error
    if response.status_code == 200:
        assert body["data"] is not None
    else:  # refusals are deliberate (limits, bad cursors...): 4xx with a reason, never a crash
        assert 400 <= response.status_code < 500 and body["errors"], body


# schemathesis' own pytest loader (schemathesis.pytest.from_fixture) breaks on pytest 9 (it sets
# request.node._nodeid), so its Hypothesis strategy is driven with @given directly.
@pytest.mark.slow
def test_generated_queries_never_fail_on_the_server(graphql_schema: object) -> None:
    strategy = graphql_schema.as_strategy()  # type: ignore[attr-defined]
    seen: set[str] = set()
    statuses: dict[int, int] = {}

    @given(case=strategy)
    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    def run(case: schemathesis.Case) -> None:
        seen.add(case.operation.label)
        check(case, statuses)

    run()
    assert {"Query.cryptoNews", "Query.predictionEvents"} <= seen, seen
    print("statuses:", statuses)
    assert statuses.get(200, 0) >= 50, statuses  # the fuzzer must also reach execution, not only refusals


def test_the_fuzzer_covers_every_root_field(graphql_schema: object) -> None:
    labels = {op.ok().label for op in graphql_schema.get_all_operations()}  # type: ignore[attr-defined]
    assert {"Query.cryptoNews", "Query.predictionEvents", "Query.usage", "Query.tickers"} <= labels, labels


def test_mutations_are_refused_clearly(fuzz_server: ApiServer) -> None:
    import httpx

    r = httpx.post(fuzz_server.url(f"/crypto-news/{KEY}"), json={"query": "mutation { x }"})
    assert r.status_code == 400 and r.json()["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
