-- Ingestion: one row per unique article, per-feed health, conditional-GET state.
-- All timestamps are UTC, stored as TIMESTAMP (no time zone).
CREATE TABLE raw_articles (
    id            VARCHAR PRIMARY KEY,   -- 'a_' + 16 hex of sha256(canonical url; or feed url + guid when no link)
    source_name   VARCHAR NOT NULL,
    feed_url      VARCHAR NOT NULL,
    url           VARCHAR,               -- canonical: tracking params and fragment removed
    guid          VARCHAR,
    title         VARCHAR NOT NULL,
    summary       VARCHAR NOT NULL,      -- plain text
    content_html  VARCHAR,
    authors       VARCHAR[] NOT NULL,
    categories    VARCHAR[] NOT NULL,
    image_url     VARCHAR,
    published_at  TIMESTAMP NOT NULL,
    date_inferred BOOLEAN NOT NULL,      -- true: missing, unreadable, far-future (> fetched_at + 1 day) or pre-1995 date replaced by fetched_at
    fetched_at    TIMESTAMP NOT NULL,    -- first time we saw it
    updated_at    TIMESTAMP NOT NULL,    -- last time its content changed
    language      VARCHAR,
    content_hash  VARCHAR NOT NULL       -- hash of title + summary + content: drives updates and re-enrichment
);

CREATE TABLE feed_fetches (
    run_id       VARCHAR NOT NULL,
    feed_name    VARCHAR NOT NULL,
    feed_url     VARCHAR NOT NULL,
    started_at   TIMESTAMP NOT NULL,
    duration_ms  DOUBLE NOT NULL,
    http_status  INTEGER,
    items_seen   INTEGER NOT NULL,
    items_new    INTEGER NOT NULL,
    items_updated INTEGER NOT NULL,
    not_modified BOOLEAN NOT NULL,
    bytes        BIGINT,
    error        VARCHAR,               -- set when the feed gave nothing usable this run
    warning      VARCHAR                -- set when it gave items but something was off (cut body, lenient parse)
);

CREATE TABLE feed_state (
    feed_url      VARCHAR PRIMARY KEY,
    etag          VARCHAR,
    last_modified VARCHAR,
    updated_at    TIMESTAMP NOT NULL
);
