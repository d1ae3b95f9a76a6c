"""Stories: the incremental grouping on real-looking articles with the packaged encoder, in a real warehouse file;
stable ids; the snapshot tables; `stories`, `News.story` and `cryptoNews(collapseStories:)` over a real server;
and a snapshot published before stories still serving."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import httpx
import numpy as np
import pytest

from api.access import StaticKeys
from api.app import create_app
from api.cost import query_cost
from api.gql_documents import DocumentCache
from api.gql_exec import coerce_variables
from pipeline.stories.cluster import Clusterer, Item, story_id
from pipeline.stories.features import price_piece, sentences
from pipeline.stories.pairs import sentence_features
from pipeline.stories.refresh import refresh_stories
from tests.support.apiserver import ApiServer
from tests.support.newsdata import Data, write
from warehouse.config import Settings
from warehouse.db import connect
from warehouse.publish import publish_snapshot
from warehouse.published import current_snapshot

KEY = "k"
T0 = datetime(2024, 5, 23, 20, 0)
ID_RE = re.compile(r"^st_[A-Za-z0-9]{20}$")

# One news told by four sources (one re-posting it), and unrelated news of the same days.
ETF = [
    ("CoinDesk", 0, "SEC Approves Spot Ether ETFs in Landmark Decision",
     "The U.S. Securities and Exchange Commission approved 19b-4 filings for spot ether ETFs from eight issuers."),
    ("Decrypt", 1, "SEC approves spot Ethereum ETFs from BlackRock, Fidelity and others",
     "The Securities and Exchange Commission has approved applications to list spot Ethereum ETFs."),
    ("The Block", 2, "SEC approves 19b-4 forms for spot Ethereum ETFs",
     "The SEC approved the 19b-4 filings for eight spot ether exchange-traded funds on Thursday."),
    ("Cointelegraph", 3, "BREAKING: SEC approves spot Ether ETFs",
     "The United States Securities and Exchange Commission has approved 19b-4 filings for spot Ether ETFs."),
    ("Decrypt", 5, "SEC approves spot Ethereum ETFs from BlackRock, Fidelity and others",
     "The Securities and Exchange Commission has approved applications to list spot Ethereum ETFs (updated)."),
]
OTHER = [
    ("CoinDesk", 4, "Solana DEX volume hits record as memecoin mania returns",
     "Decentralized exchanges on Solana processed record volumes this week as memecoins surged."),
    ("The Block", 6, "Mt. Gox moves $9 billion in bitcoin for the first time in five years",
     "Wallets tied to the defunct exchange Mt. Gox moved 141,686 BTC on Tuesday."),
    ("Cointelegraph", 7, "Ripple launches stablecoin pilot in Japan",
     "Ripple said it will test a yen-pegged stablecoin with a Japanese bank."),
]
LATE = ("CryptoSlate", 9, "SEC greenlights spot Ether ETFs, trading expected within weeks",
        "The SEC approved 19b-4 filings for spot Ether ETFs; the funds still need S-1 approval before trading.")


def _article(i: int, source: str, hours: int, title: str, summary: str) -> dict[str, Any]:
    return {"id": f"a_{i:016x}", "source_name": source, "url": f"https://news.example/{i}", "title": title,
            "summary": summary, "image_url": None, "published_at": T0 + timedelta(hours=hours),
            "sentiment": "positive", "sentiment_score": 0.2 * (i % 5), "tickers": ["ETH"] if "Eth" in title else [],
            "topics": ["etf"] if "ETF" in title else ["markets"]}


def articles() -> list[dict[str, Any]]:
    return [_article(i, *row) for i, row in enumerate(ETF + OTHER)]


def _stories(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return dict(con.execute("SELECT article_id, story_id FROM story_articles").fetchall())


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("stories")
    con = connect(home / "warehouse.duckdb")
    try:
        con.execute("BEGIN")
        write(con, Data(articles(), []))
        con.execute("COMMIT")
        refresh_stories(con)
        publish_snapshot(con, home / "snapshots")
    finally:
        con.close()
    return home


@pytest.fixture(scope="module")
def server(home: Path) -> Iterator[ApiServer]:
    with ApiServer(create_app(Settings(home=home, pdf_prewarm=False), access=StaticKeys([KEY]))) as srv:
        yield srv


def ok(srv: ApiServer, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    r = httpx.post(srv.url(f"/crypto-news/{KEY}"), json={"query": query, "variables": variables or {}}, timeout=30)
    assert r.status_code == 200 and "errors" not in r.json(), r.text
    return r.json()["data"]


# --------------------------------------------------------------------------------------------- grouping


def test_story_ids_have_the_documented_form() -> None:
    assert ID_RE.match(story_id("a_1")) and story_id("a_1") == story_id("a_1") != story_id("a_2")


def test_the_window_bounds_a_story() -> None:
    v = np.ones(4, dtype=np.float32) / 2
    said = {"title_words": frozenset({"exchange", "hacked"}), "lede_words": frozenset({"exchange", "hacked"}),
            "names": frozenset({"bybit"})}
    c = Clusterer()
    first = c.add(Item("x", T0, v, v, **said))
    assert c.add(Item("y", T0 + timedelta(hours=47), v, v, **said)) == first
    assert c.add(Item("z", T0 + timedelta(hours=200), v, v, **said)) != first  # same words a week later: another story


def test_look_alike_reports_a_day_apart_do_not_chain_one_story_for_weeks() -> None:
    """An operator's review: a price bot's daily look-alike headlines, each within the window of the one before,
    made one story of 22 days. A story spans at most MAX_SPAN (96 h) from its first article."""
    v = np.ones(4, dtype=np.float32) / 2
    said = {"title_words": frozenset({"bitcoin", "gains"}), "lede_words": frozenset({"bitcoin", "gains"}),
            "names": frozenset({"bitcoin"})}
    c = Clusterer()
    stories = [c.add(Item(f"d{k}", T0 + timedelta(hours=20 * k), v, v, **said)) for k in range(26)]  # 21 days
    firsts = {sid: T0 + timedelta(hours=20 * stories.index(sid)) for sid in stories}
    spans = [T0 + timedelta(hours=20 * k) - firsts[sid] for k, sid in enumerate(stories)]
    assert max(spans) <= timedelta(hours=96) and len(set(stories)) >= 5, (len(set(stories)), max(spans))
    assert stories[0] == stories[1] == stories[4]  # within the span they still join
    # An article arriving late, dated before a story's first one, may not stretch it past the span either.
    c = Clusterer()
    late = [c.add(Item(f"e{k}", T0 + timedelta(hours=20 * k), v, v, **said)) for k in range(5)]  # 80 h
    assert len(set(late)) == 1
    assert c.add(Item("early", T0 - timedelta(hours=40), v, v, **said)) != late[0]


def _unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


# Three ways to word one news, far apart from one another (cosine 0.3 or less, under the floor), and two reports
# close to two of them each (cosine 0.81): each report is surely the same as both.
ALPHA, BETA, GAMMA = _unit(1, 0, 0, 0), _unit(0.3, 0.954, 0, 0), _unit(0.3, 0, 0.954, 0)
ALPHA_BETA, ALPHA_GAMMA = _unit(*(ALPHA + BETA)), _unit(*(ALPHA + GAMMA))
SAID = {"title_words": frozenset({"exchange", "hacked"}), "lede_words": frozenset({"exchange", "hacked"}),
        "names": frozenset({"bybit"})}


def test_an_article_that_reports_two_stories_merges_them_into_the_first() -> None:
    c = Clusterer()
    a = c.add(Item("a", T0, ALPHA, ALPHA, **SAID))
    b = c.add(Item("b", T0 + timedelta(hours=1), BETA, BETA, **SAID))
    assert a != b  # nothing links them yet
    assert c.add(Item("c", T0 + timedelta(hours=2), ALPHA_BETA, ALPHA_BETA, **SAID)) == a  # the earlier one
    assert c.merged == {b: a} and c.resolve(b) == a and c.story_of == [a, a, a]


def _lookup_embed(texts: list[str]) -> np.ndarray:
    """The embedding as a lookup of the words above: the grouping's bookkeeping is under test, not the encoder."""
    vec = {"ALPHA+BETA": ALPHA_BETA, "ALPHA+GAMMA": ALPHA_GAMMA, "ALPHA": ALPHA, "BETA": BETA, "GAMMA": GAMMA}
    return np.stack([next(v for k, v in vec.items() if k in t) for t in texts])


def _report(i: int, hours: int, word: str) -> dict[str, Any]:
    return {**_article(i, f"s{i}.example", hours, f"Exchange hacked {word}", f"Exchange hacked {word}."),
            "tickers": []}


def _runner(con: duckdb.DuckDBPyConnection) -> Any:
    def run(*rows: dict[str, Any]) -> Any:
        con.execute("BEGIN")
        write(con, Data(list(rows), []))
        con.execute("COMMIT")
        return refresh_stories(con, embed_fn=_lookup_embed)

    return run


def test_merged_stories_move_their_articles_and_keep_the_retired_id_listed(tmp_path: Path) -> None:
    """In the warehouse: the retired story's articles move, its row goes, ``story_merges`` says where it went, and
    when the survivor is merged in turn the listed ids follow."""
    report, embed = _report, _lookup_embed
    con = connect(tmp_path / "warehouse.duckdb")
    try:
        run = _runner(con)

        assert run(report(0, 0, "ALPHA"), report(1, 1, "BETA")).stories == 2
        first, second = _stories(con)["a_0000000000000000"], _stories(con)["a_0000000000000001"]
        got = run(report(2, 2, "ALPHA+BETA"))
        assert got.merged == 1 and got.stories == 1 and set(_stories(con).values()) == {first}
        assert con.execute("SELECT id, articles, sources FROM stories").fetchall() == [(first, 3, 3)]
        assert con.execute("SELECT story_id, merged_into FROM story_merges").fetchall() == [(second, first)]

        assert run(report(3, -1, "GAMMA")).merged == 0  # a late article of an earlier, other story
        earliest = _stories(con)["a_0000000000000003"]
        got = run(report(4, 3, "ALPHA+GAMMA"))  # bridges it with the merged story: the earlier one stays
        assert got.merged == 1 and set(_stories(con).values()) == {earliest}
        assert con.execute("SELECT id, articles FROM stories").fetchall() == [(earliest, 5)]
        assert sorted(con.execute("SELECT story_id, merged_into FROM story_merges").fetchall()) == sorted(
            [(second, earliest), (first, earliest)])
        assert refresh_stories(con, embed_fn=embed).merged == 0  # nothing new: nothing moves
    finally:
        con.close()


def test_a_merge_keeps_the_story_begun_first_and_lists_only_stored_ids(tmp_path: Path) -> None:
    """The survivor is the story first seen, though its first article lies outside the window the new article
    reaches; a story begun and merged within one run was never stored, so no id of it is retired."""
    con = connect(tmp_path / "warehouse.duckdb")
    try:
        run = _runner(con)
        run(_report(0, -60, "GAMMA"), _report(1, -45, "ALPHA"), _report(2, -20, "GAMMA"))
        old, younger = _stories(con)["a_0000000000000000"], _stories(con)["a_0000000000000001"]
        assert old != younger and _stories(con)["a_0000000000000002"] == old
        got = run(_report(3, -10, "BETA"), _report(4, -5, "ALPHA+BETA"))  # BETA's story: begun and merged now
        assert got.merged == 0 and con.execute("SELECT count(*) FROM story_merges").fetchall() == [(0,)]
        assert _stories(con)["a_0000000000000003"] == _stories(con)["a_0000000000000004"] == younger
        got = run(_report(5, 0, "ALPHA+GAMMA"))  # reaches back to -48 h: the GAMMA story's -60 h article is outside
        assert got.merged == 1 and set(_stories(con).values()) == {old}
        assert con.execute("SELECT story_id, merged_into FROM story_merges").fetchall() == [(younger, old)]
        assert con.execute("SELECT first_seen FROM stories").fetchall() == [(T0 - timedelta(hours=60),)]
    finally:
        con.close()


def test_time_apart_and_one_outlet_lower_the_odds() -> None:
    v = np.ones(4, dtype=np.float32) / 2
    a = Item("a", T0, v, v, source="p.example")
    near, far = Item("b", T0 + timedelta(hours=1), v, v), Item("c", T0 + timedelta(hours=40), v, v)
    model = Clusterer().model
    assert model.probability(a, near) > model.probability(a, far)
    same_outlet = Item("d", T0 + timedelta(hours=1), v, v, source="p.example")
    assert model.probability(a, near) > model.probability(a, same_outlet)


@pytest.mark.parametrize(("title", "lede", "piece"), [
    ("XRP Price Prediction: Can XRP Reach $5 This Month?", "", True),
    ("Solana Bulls Eye Breakout Above Key Resistance", "", True),
    ("ETH holds support as RSI cools", "", True),
    ("Bitcoin Slides 3% Overnight", "The MACD crossed lower while the RSI left overbought levels near resistance.", True),
    ("SEC Approves Spot Ether ETFs in Landmark Decision", "Eight issuers can list the funds on Thursday.", False),
    ("Bybit Hacked for $1.4 Billion in Ether", "Attackers drained a cold wallet of the exchange.", False),
])
def test_generic_price_pieces_are_told_from_news(title: str, lede: str, piece: bool) -> None:
    assert price_piece(title, lede) is piece


def test_two_generic_price_pieces_are_less_likely_one_story() -> None:
    """Outlets write a price piece per asset and day: alike in words and tickers, rarely the same news."""
    v = np.ones(4, dtype=np.float32) / 2
    said = {"tickers": frozenset({"BTC"}), "title_words": frozenset({"bitcoin", "price", "resistance"})}
    model = Clusterer().model
    news = model.probability(Item("a", T0, v, v, **said), Item("b", T0 + timedelta(hours=2), v, v, **said))
    pieces = model.probability(Item("a", T0, v, v, price_piece=True, **said),
                               Item("b", T0 + timedelta(hours=2), v, v, price_piece=True, **said))
    assert pieces < news


def test_sources_group_and_every_article_has_one_story(home: Path) -> None:
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        got = _stories(con)
        n = con.execute("SELECT count(*) FROM articles").fetchall()[0][0]
        assert len(got) == n  # every article in exactly one story (article_id is the key)
        etf = {got[f"a_{i:016x}"] for i in range(len(ETF))}
        assert len(etf) == 1, etf  # four sources and a re-post: one story
        others = {got[f"a_{i:016x}"] for i in range(len(ETF), len(ETF) + len(OTHER))}
        assert len(others) == len(OTHER) and not others & etf
        row = con.execute("SELECT id, title, articles, sources, first_seen, last_seen FROM stories WHERE id = ?",
                          [etf.pop()]).fetchall()[0]
        assert row[0] == story_id("a_0000000000000000") and ID_RE.match(row[0])
        assert row[1:4] == (ETF[0][2], 5, 4) and row[4] == T0 and row[5] == T0 + timedelta(hours=5)
    finally:
        con.close()


def _grouped(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """A warehouse with the articles above, grouped once."""
    con = connect(tmp_path / "warehouse.duckdb")
    con.execute("BEGIN")
    write(con, Data(articles(), []))
    con.execute("COMMIT")
    refresh_stories(con)
    return con


def test_ids_are_stable_and_a_late_article_joins(tmp_path: Path) -> None:
    con = _grouped(tmp_path)
    try:
        before = _stories(con)
        again = refresh_stories(con)  # a second materialization finds nothing to do and changes nothing
        assert again.new == 0 and again.embedded == 0 and _stories(con) == before
        con.execute("BEGIN")
        write(con, Data([_article(len(ETF) + len(OTHER), *LATE)], []))
        con.execute("COMMIT")
        report = refresh_stories(con)
        after = _stories(con)
        assert report.new == 1 and report.embedded == 1 and report.touched == 1
        assert {k: after[k] for k in before} == before  # nobody moved
        assert after[f"a_{len(ETF) + len(OTHER):016x}"] == before["a_0000000000000000"]  # joined, id kept
        assert con.execute("SELECT sources FROM stories WHERE id = ?", [before["a_0000000000000000"]]).fetchall() == [(5,)]
        assert con.execute("SELECT count(*) FROM article_embeddings").fetchall()[0][0] == len(after)
    finally:
        con.close()


def test_a_re_dated_or_removed_article_brings_its_story_in_step(tmp_path: Path) -> None:
    """An article's date corrected after grouping (an inferred date replaced by the real one) left its story's
    first_seen and the grouping window's time as they were; a story whose every article was removed stayed."""
    con = _grouped(tmp_path)
    try:
        etf = _stories(con)["a_0000000000000000"]
        solo = _stories(con)["a_0000000000000005"]  # the Solana DEX story, one article
        earlier = T0 - timedelta(hours=2)
        con.execute("UPDATE articles SET published_at = ? WHERE id = 'a_0000000000000002'", [earlier])
        con.execute("DELETE FROM articles WHERE id = 'a_0000000000000005'")
        report = refresh_stories(con)
        assert report.resynced == 2 and report.new == 0
        assert con.execute("SELECT first_seen, articles FROM stories WHERE id = ?", [etf]).fetchall() == [(earlier, 5)]
        assert con.execute("SELECT published_at FROM story_articles WHERE article_id = 'a_0000000000000002'"
                           ).fetchall() == [(earlier,)]
        assert con.execute("SELECT count(*) FROM stories WHERE id = ?", [solo]).fetchall() == [(0,)]
        assert con.execute("SELECT count(*) FROM story_articles WHERE article_id = 'a_0000000000000005'"
                           ).fetchall() == [(0,)]
        assert refresh_stories(con).resynced == 0  # in step: nothing more to do
    finally:
        con.close()


def test_articles_stored_by_an_older_encoder_are_embedded_again_when_new_ones_meet_them(tmp_path: Path) -> None:
    """After an upgrade that changes what is embedded (the sentences), the grouped articles a new article is compared
    with are embedded again; the ones no new article reaches are left as they are, and nobody moves story."""
    from pipeline.stories.features import ENCODER_VERSION

    con = _grouped(tmp_path)
    try:
        before = _stories(con)
        con.execute("UPDATE article_embeddings SET encoder = 'an older one', sent_vecs = NULL")
        con.execute("BEGIN")
        late = _article(len(ETF) + len(OTHER), *LATE)
        write(con, Data([late], []))
        con.execute("COMMIT")
        report = refresh_stories(con)
        in_window = [r[0] for r in con.execute(
            "SELECT id FROM articles WHERE published_at BETWEEN ? AND ? AND id <> ?",
            [late["published_at"] - timedelta(hours=48), late["published_at"] + timedelta(hours=48), late["id"]],
        ).fetchall()]
        assert report.embedded == 1 + len(in_window) and in_window
        current = dict(con.execute("SELECT article_id, encoder = ? AND len(sent_vecs) > 0 FROM article_embeddings",
                                   [ENCODER_VERSION]).fetchall())
        assert all(current[a] for a in in_window) and current[late["id"]]
        after = _stories(con)
        assert {k: after[k] for k in before} == before and after[late["id"]] == before["a_0000000000000000"]
    finally:
        con.close()


# --------------------------------------------------------------------------------------------- API

STORIES = """query S($n: Int, $after: String, $min: Int, $t: [String!]) {
  stories(first: $n, after: $after, minSources: $min, tickers: $t) {
    pageInfo { hasNextPage endCursor }
    edges { cursor node { id title firstSeen lastSeen articleCount sourceCount meanSentiment tickers topics articleIds } }
  }
}"""
NEWS = """query N($n: Int, $after: String, $c: Boolean) {
  cryptoNews(first: $n, after: $after, collapseStories: $c) {
    pageInfo { hasNextPage endCursor }
    edges { node { id story { id title articleCount sourceCount firstSeen } } }
  }
}"""


def _all(srv: ApiServer, query: str, field: str, variables: dict[str, Any]) -> list[dict[str, Any]]:
    out, after = [], None
    while True:
        page = ok(srv, query, {**variables, "after": after})[field]
        out += [e["node"] for e in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            return out
        after = page["pageInfo"]["endCursor"]


def test_stories_page_newest_first(server: ApiServer) -> None:
    nodes = _all(server, STORIES, "stories", {"n": 2})
    assert len(nodes) == 1 + len(OTHER)
    assert [n["firstSeen"] for n in nodes] == sorted((n["firstSeen"] for n in nodes), reverse=True)
    multi = _all(server, STORIES, "stories", {"n": 2, "min": 3})
    assert [(n["articleCount"], n["sourceCount"], n["articleIds"][0]) for n in multi] == [(5, 4, "a_0000000000000000")]
    assert multi[0]["meanSentiment"] == pytest.approx(sum(0.2 * i for i in range(5)) / 5)
    assert [n["id"] for n in _all(server, STORIES, "stories", {"n": 5, "t": ["eth"]})] == [multi[0]["id"]]


def test_news_carry_their_story_and_collapse_pages_once(server: ApiServer) -> None:
    every = _all(server, NEWS, "cryptoNews", {"n": 3})
    assert len(every) == len(ETF) + len(OTHER) and all(n["story"] and ID_RE.match(n["story"]["id"]) for n in every)
    collapsed = _all(server, NEWS, "cryptoNews", {"n": 2, "c": True})
    ids = [n["id"] for n in collapsed]
    assert len(ids) == len(set(ids)) == 1 + len(OTHER)  # one per story, none twice across pages
    assert "a_0000000000000000" in ids  # the story's earliest article stands for it
    assert {n["story"]["id"] for n in collapsed} == {n["story"]["id"] for n in every}


FILTERED = """query N($n: Int, $after: String, $last: Int, $before: String, $src: [String!], $since: DateTime,
                 $q: String) {
  cryptoNews(first: $n, after: $after, last: $last, before: $before, collapseStories: true, sources: $src,
             since: $since, search: $q) {
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    edges { node { id story { id } } }
  }
}"""


@pytest.mark.parametrize(("variables", "expected"), [
    # the ETF story's first report is CoinDesk's: another outlet's reports still list it, by their earliest
    ({"src": ["Decrypt"]}, ["a_0000000000000001"]),
    ({"src": ["the block"]}, ["a_0000000000000006", "a_0000000000000002"]),
    # a story begun before `since` is listed by its earliest article from `since` on
    ({"since": (T0 + timedelta(hours=2)).isoformat() + "Z"},
     ["a_0000000000000007", "a_0000000000000006", "a_0000000000000005", "a_0000000000000002"]),
    ({"q": "S-1"}, []),
    ({"q": "applications to list"}, ["a_0000000000000001"]),
])
def test_collapse_with_filters_lists_each_story_with_a_matching_article_once(
    server: ApiServer, variables: dict[str, Any], expected: list[str]
) -> None:
    for n in (1, 3):
        got = _all(server, FILTERED, "cryptoNews", {"n": n, **variables})
        assert [g["id"] for g in got] == expected, (n, got)
        back, before = [], None  # and backwards, from the end
        while True:
            page = ok(server, FILTERED, {"last": n, "before": before, **variables})["cryptoNews"]
            back = [e["node"]["id"] for e in page["edges"]] + back
            if not page["pageInfo"]["hasPreviousPage"]:
                break
            before = page["pageInfo"]["startCursor"]
        assert back == expected, (n, back)


def test_stories_cost_like_other_connections() -> None:
    def cost(query: str) -> int:
        prepared = DocumentCache().get(query)
        op = prepared.operation(None)
        return query_cost(op, prepared.fragments, coerce_variables(op, {}))

    assert cost("{ stories(first: 30) { edges { node { id } } } }") == 31
    assert cost("{ stories { edges { node { id } } } }") == 11
    assert cost("{ cryptoNews(first: 20, collapseStories: true) { edges { node { story { id } } } } }") == 21


def test_a_snapshot_from_before_stories_still_serves(home: Path, tmp_path: Path) -> None:
    old = tmp_path / "home"
    (old / "snapshots").mkdir(parents=True)
    src = current_snapshot(home / "snapshots")
    assert src is not None
    con = duckdb.connect(str(old / "snapshots" / src.name))
    con.execute(f"ATTACH '{src}' AS s (READ_ONLY)")
    for table in ("news", "events", "filter_values", "sentiment", "snapshot_info"):
        drop = " EXCLUDE (story_id, story_title, story_articles, story_sources, story_first_seen, story_first)" \
            if table == "news" else ""
        con.execute(f"CREATE TABLE {table} AS SELECT *{drop} FROM s.{table}")
    con.execute("CREATE UNIQUE INDEX news_id ON news (id)")
    con.execute("DETACH s")
    con.close()
    (old / "snapshots" / "CURRENT").write_text(src.name + "\n")
    with ApiServer(create_app(Settings(home=old, pdf_prewarm=False), access=StaticKeys([KEY]))) as srv:
        nodes = _all(srv, NEWS, "cryptoNews", {"n": 3, "c": True})
        assert len(nodes) == len(ETF) + len(OTHER) and all(n["story"] is None for n in nodes)
        assert ok(srv, STORIES, {"n": 5})["stories"]["edges"] == []


def test_sentences_are_the_title_and_the_summary_s_first_ones() -> None:
    summary = ("<p>Short one.</p> The exchange said withdrawals resume on Monday after the audit. "
               "Users were told to check their balances before trading again! Why? Nobody said whether fees change.")
    assert sentences("Exchange halts withdrawals", summary) == [
        "Exchange halts withdrawals", "The exchange said withdrawals resume on Monday after the audit.",
        "Users were told to check their balances before trading again!", "Nobody said whether fees change."]
    assert sentences("Only a title", None) == ["Only a title"]


def test_a_headline_told_in_another_article_s_second_sentence_counts() -> None:
    """Two reports of one news put it in different places: one's headline is the other's second sentence."""
    rng = np.random.default_rng(3)
    unit = [v / np.linalg.norm(v) for v in rng.normal(size=(4, 384))]
    a = Item("a", T0, unit[0], unit[0], sent_vecs=np.stack([unit[0], unit[1]]))
    b = Item("b", T0, unit[2], unit[2], sent_vecs=np.stack([unit[2], unit[0]]))  # b's 2nd sentence is a's title
    c = Item("c", T0, unit[2], unit[2], sent_vecs=np.stack([unit[2], unit[3]]))
    told, not_told = sentence_features(a, b), sentence_features(a, c)
    assert told[0] == pytest.approx(1.0, abs=1e-5) and told[2] == pytest.approx(1.0, abs=1e-5)
    assert not_told[0] < 0.3 and not_told[2] < 0.3
    assert sentence_features(Item("x", T0, unit[0], unit[0]), Item("y", T0, unit[0], unit[0]))[0] == pytest.approx(1.0)


def test_the_pair_trainer_recovers_known_weights() -> None:
    from pipeline.stories import pairs

    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, size=(20_000, 3))
    truth, bias = np.array([4.0, -2.0, 1.0]), -1.5
    y = (rng.uniform(size=len(x)) < 1 / (1 + np.exp(-(x @ truth + bias)))).astype(float)
    w, b = pairs.fit(x, y, l2=0.0)
    assert np.allclose(w, truth, atol=0.25) and abs(b - bias) < 0.25


def test_the_shipped_pair_model_names_this_codes_features() -> None:
    from pipeline.stories import pairs

    model = pairs.load()
    assert len(model.weights) == len(pairs.FEATURES) and 0 < model.threshold < 1
