"""What a part holds: the SQL that fills its four tables from the warehouse, for one period.

Known limits: ``story_first`` (the story's earliest article) is the article published at the story's
``first_seen`` (smallest id there), and a story's members and summary are looked up by their time as grouped,
then by id for any left; a story whose first article was deleted has no article standing for it under
``collapseStories`` until the stories step recomputes the story (``warehouse.stories.resync``).

``warehouse.publish.publish_snapshot`` (the single-file layout) fills its tables with the same SQL, over one
unbounded period.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb

from warehouse.parts.changes import SOURCES, hull_sql
from warehouse.parts.periods import range_sql

# Per article of a story but its first: the time of the article before it and the union of the earlier articles'
# tickers, topics, source names (lower case) and sentiment labels. collapseStories with one such filter then lists
# a story by its earliest matching article with a row condition, as fast as a plain filtered page (the general
# case checks each page's stories with a grouped query). Order as ``story_first``: publication time, then id.
# MEMBERS_SQL lists the stories' articles ({members}: story_id, article_id) with what PRIOR_SQL needs of them.
MEMBERS_SQL = """
CREATE OR REPLACE TEMP TABLE _cw_members AS
SELECT m.story_id, a.id, a.published_at, coalesce(a.tickers, []::VARCHAR[]) AS tickers,
       coalesce(a.topics, []::VARCHAR[]) AS topics, lower(a.source_name) AS source,
       CASE lower(a.sentiment) WHEN 'positive' THEN 'Positive' WHEN 'negative' THEN 'Negative'
                               WHEN 'neutral' THEN 'Neutral' END AS sentiment
FROM ({members}) m JOIN {articles} a ON a.id = m.article_id
"""
PRIOR_SQL = """
CREATE OR REPLACE TEMP TABLE _cw_prior AS
WITH ordered AS (
    SELECT story_id, id, published_at,
           lag(published_at) OVER (PARTITION BY story_id ORDER BY published_at, id) AS prev_at
    FROM _cw_members
), vals AS (
    SELECT story_id, 't' AS kind, unnest(tickers) AS v, published_at, id FROM _cw_members
    UNION ALL SELECT story_id, 'p', unnest(topics), published_at, id FROM _cw_members
    UNION ALL SELECT story_id, 's', source, published_at, id FROM _cw_members WHERE source IS NOT NULL
    UNION ALL SELECT story_id, 'e', sentiment, published_at, id FROM _cw_members WHERE sentiment IS NOT NULL
), firsts AS (  -- each value's first article in its story: linear in the story's size, not quadratic
    SELECT story_id, kind, v, published_at AS at, id FROM (
        SELECT *, row_number() OVER (PARTITION BY story_id, kind, v ORDER BY published_at, id) AS k FROM vals
    ) WHERE k = 1
)
SELECT o.id AS article_id, o.prev_at AS prior_at,
       list(f.v) FILTER (WHERE f.kind = 't') AS prior_tickers, list(f.v) FILTER (WHERE f.kind = 'p') AS prior_topics,
       list(f.v) FILTER (WHERE f.kind = 's') AS prior_sources,
       list(f.v) FILTER (WHERE f.kind = 'e') AS prior_sentiments
FROM ordered o
LEFT JOIN firsts f ON f.story_id = o.story_id AND (f.at < o.published_at OR (f.at = o.published_at AND f.id < o.id))
WHERE o.prev_at IS NOT NULL
GROUP BY o.id, o.prev_at
"""

# One period's news. The story summary comes from ``stories``; ``story_first`` is the
# story's earliest article: published at the story's ``first_seen`` (so in the same period), smallest id there.
PART_NEWS_SQL = """
CREATE TABLE {db}.news AS
WITH a AS (SELECT * FROM articles WHERE {where})
SELECT
    (row_number() OVER (ORDER BY a.published_at DESC, a.id DESC) - 1)::BIGINT AS pos,
    a.id,
    a.published_at,
    coalesce(a.date_inferred, false) AS date_inferred,
    a.title,
    a.summary AS text,
    CASE lower(a.sentiment)
        WHEN 'positive' THEN 'Positive' WHEN 'negative' THEN 'Negative' WHEN 'neutral' THEN 'Neutral'
    END AS sentiment,
    a.sentiment_score,
    coalesce(a.tickers, []::VARCHAR[]) AS tickers,
    coalesce(a.topics, []::VARCHAR[]) AS topics,
    a.source_name,
    a.url AS news_url,
    a.image_url,
    coalesce(ts.ticker_sentiments, []) AS ticker_sentiments,
    sa.story_id,
    st.title AS story_title,
    st.articles AS story_articles,
    st.sources AS story_sources,
    st.first_seen AS story_first_seen,
    sa.story_id IS NULL OR (a.published_at = st.first_seen
                            AND a.id = min(a.id) OVER (PARTITION BY sa.story_id, a.published_at)) AS story_first,
    pr.prior_at AS story_prev_at,
    pr.prior_tickers AS story_prior_tickers,
    pr.prior_topics AS story_prior_topics,
    pr.prior_sources AS story_prior_sources,
    pr.prior_sentiments AS story_prior_sentiments
FROM a
LEFT JOIN _cw_sa sa ON sa.article_id = a.id
LEFT JOIN _cw_st st ON st.id = sa.story_id
LEFT JOIN _cw_ts ts ON ts.article_id = a.id
LEFT JOIN _cw_prior pr ON pr.article_id = a.id
ORDER BY pos
"""

# The children of the articles of every period a publish builds, looked up once (temp tables on the writer's
# connection): their story (by story_articles' time as grouped, then by id for any left: corrected dates), the
# story summary (stories first seen up to two days before, then by id), and each ticker's own sentiment (one pass
# over article_tickers, which has no time to narrow it by).
STAGE_SQL = """
CREATE OR REPLACE TEMP TABLE _cw_a AS SELECT id, published_at, tickers FROM articles WHERE {where};
CREATE OR REPLACE TEMP TABLE _cw_sa AS
    SELECT article_id, story_id FROM story_articles
    WHERE ({sa_where}) AND article_id IN (SELECT id FROM _cw_a);
CREATE OR REPLACE TEMP TABLE _cw_ts AS
    SELECT t.article_id, list(struct_pack(ticker := t.ticker, label := CASE lower(t.sentiment) WHEN 'positive' THEN 'Positive'
                                          WHEN 'negative' THEN 'Negative' WHEN 'neutral' THEN 'Neutral' END,
                                          score := t.sentiment_score)
                ORDER BY list_position(a.tickers, t.ticker)) AS ticker_sentiments
    FROM article_tickers t JOIN _cw_a a ON a.id = t.article_id
    WHERE t.sentiment IS NOT NULL GROUP BY t.article_id;
"""


def stage(con: duckdb.DuckDBPyConnection, ranges: list[tuple[datetime | None, datetime | None]]) -> None:
    """Look the children of the articles in ``ranges`` up once, for every part this publish builds."""
    where = f"({hull_sql('published_at', ranges)}) AND (" + (
        " OR ".join(f"({range_sql('published_at', lo, hi)})" for lo, hi in ranges) or "false") + ")"
    wide = " OR ".join(
        f"({range_sql('first_seen', lo - timedelta(days=2) if lo is not None else None, hi)})" for lo, hi in ranges
    ) or "false"
    for statement in STAGE_SQL.format(where=where, sa_where=where).split(";"):
        if statement.strip():
            con.execute(statement)
    # Articles whose story row carries another time (a date corrected after grouping): by id, only when some are.
    if con.execute("SELECT (SELECT count(*) FROM _cw_a) > (SELECT count(*) FROM _cw_sa)").fetchall()[0][0]:
        con.execute("""INSERT INTO _cw_sa SELECT article_id, story_id FROM story_articles
                       WHERE article_id IN (SELECT id FROM _cw_a WHERE id NOT IN (SELECT article_id FROM _cw_sa))""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _cw_st AS SELECT id, title, articles, sources, first_seen FROM stories
                    WHERE ({wide}) AND id IN (SELECT story_id FROM _cw_sa)""")
    # Stories first seen more than two days before the period (long chains): by id, only when some are.
    if con.execute("SELECT (SELECT count(DISTINCT story_id) FROM _cw_sa) > (SELECT count(*) FROM _cw_st)").fetchall()[0][0]:
        con.execute("""INSERT INTO _cw_st SELECT id, title, articles, sources, first_seen FROM stories
                       WHERE id IN (SELECT story_id FROM _cw_sa WHERE story_id NOT IN (SELECT id FROM _cw_st))""")


    _stage_prior(con)


def _stage_prior(con: duckdb.DuckDBPyConnection) -> None:
    """What the earlier articles of each story say (``PRIOR_SQL``; members may lie in periods not rebuilt now).
    Members are looked up from their story's first_seen on (zone maps skip the history: 13 ms against 80 at 1M);
    when that finds fewer than the stories count (a date corrected since grouping), by id alone."""
    lo, expected = con.execute("SELECT min(first_seen), sum(articles) FROM _cw_st WHERE articles > 1").fetchall()[0]
    multi = "story_id IN (SELECT id FROM _cw_st WHERE articles > 1)"
    since = "false" if lo is None else f"published_at >= TIMESTAMP '{lo}'"
    con.execute(MEMBERS_SQL.format(members=f"SELECT article_id, story_id FROM story_articles WHERE {since} AND {multi}",
                                   articles=f"(SELECT * FROM articles WHERE {since})"))
    if lo is not None and con.execute("SELECT count(*) FROM _cw_members").fetchall()[0][0] != expected:
        con.execute(MEMBERS_SQL.format(members=f"SELECT article_id, story_id FROM story_articles WHERE {multi}",
                                       articles="articles"))
    con.execute(PRIOR_SQL)


def unstage(con: duckdb.DuckDBPyConnection) -> None:
    for t in ("_cw_a", "_cw_sa", "_cw_st", "_cw_ts", "_cw_members", "_cw_prior"):
        con.execute(f"DROP TABLE IF EXISTS {t}")

# Members are listed from story_articles by their time as grouped: at or after the story's first_seen, at or
# before the newest last_seen of the period's stories (zone maps skip the rest).
PART_STORIES_SQL = """
CREATE TABLE {db}.stories AS
WITH s AS (SELECT * FROM stories WHERE {where})
SELECT
    (row_number() OVER (ORDER BY s.first_seen DESC, s.id DESC) - 1)::BIGINT AS pos,
    s.id, s.title, s.first_seen, s.last_seen, s.articles, s.sources, s.mean_sentiment, s.tickers, s.topics,
    m.article_ids
FROM s
JOIN (SELECT story_id, list(article_id ORDER BY published_at, article_id) AS article_ids
      FROM story_articles WHERE {members} AND story_id IN (SELECT id FROM s) GROUP BY story_id) m ON m.story_id = s.id
ORDER BY pos
"""

PART_EVENTS_SQL = """
CREATE TABLE {db}.events AS
SELECT
    (row_number() OVER (ORDER BY created_at DESC, id DESC) - 1)::BIGINT AS pos,
    id, date_trunc('millisecond', created_at) AS created_at, date, event_title, event_description, source_url,
    image_url, options, tags, asset, kind, subject, comparator, threshold, currency, resolution_criteria,
    resolution_source, withdrawn_reason, date_trunc('millisecond', updated_at) AS updated_at,
    date_trunc('millisecond', withdrawn_at) AS withdrawn_at
FROM prediction_events WHERE {where}
ORDER BY pos
"""

PART_SENTIMENT_SQL = """
CREATE TABLE {db}.sentiment AS
SELECT ticker, grain, bucket_start, articles, positive, neutral, negative, scored, mean_score
FROM asset_sentiment WHERE {where}
ORDER BY ticker, grain, bucket_start
"""

INDEXES = {"news": "id", "events": "created_at", "stories": "id"}

VALUES_SQL = """
SELECT 'newsSources' AS kind, source_name AS value FROM (SELECT DISTINCT source_name FROM {db}.news)
UNION ALL
SELECT 'newsTopics', t FROM (SELECT DISTINCT unnest(topics) AS t FROM {db}.news)
UNION ALL
SELECT 'tickers', t FROM (SELECT unnest(tickers) AS t FROM {db}.news UNION SELECT asset FROM {db}.events)
"""


def part_sql(con: duckdb.DuckDBPyConnection, table: str, alias: str, lo: datetime | None,
              hi: datetime | None) -> str:
    src, col, _ = SOURCES[table]
    where = range_sql(col, lo, hi)
    if table == "news":  # the children were staged (``stage``) for every period being built
        return PART_NEWS_SQL.format(db=alias, where=where)
    if table == "stories":
        last = con.execute(f"SELECT max(last_seen) FROM stories WHERE {where}").fetchall()[0][0]
        members = "false" if last is None else range_sql("published_at", lo, None) + f" AND published_at <= TIMESTAMP '{last}'"
        return PART_STORIES_SQL.format(db=alias, where=where, members=members)
    if table == "events":
        return PART_EVENTS_SQL.format(db=alias, where=where)
    # sentiment: by the bucket's last instant; bucket_start bounds first, for the zone maps
    near = range_sql("bucket_start", lo - timedelta(days=1) if lo is not None else None, hi)
    return PART_SENTIMENT_SQL.format(db=alias, where=f"{near} AND {range_sql(col, lo, hi)}")
