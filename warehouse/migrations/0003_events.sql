-- Derived prediction events (see docs/events.md).
CREATE TABLE prediction_events (
    id                  VARCHAR PRIMARY KEY,   -- 'pevt_' + 20 [A-Za-z0-9], from what defines the question
    event_title         VARCHAR NOT NULL,      -- the question, e.g. 'Will Bitcoin close above $100,000 on ...?'
    event_description   VARCHAR NOT NULL,
    source_url          VARCHAR,
    image_url           VARCHAR,
    source_article_id   VARCHAR NOT NULL,      -- the earliest article asking the question
    source_published_at TIMESTAMP NOT NULL,    -- its publication time; `date` is always after it
    created_at          TIMESTAMP NOT NULL,    -- millisecond precision, unique, never changed: the API cursor
    updated_at          TIMESTAMP NOT NULL,    -- last time the row's text or source changed
    date                TIMESTAMP NOT NULL,    -- resolution time (UTC): the resolution day at 00:00, or a precise time
    options             VARCHAR[] NOT NULL,    -- ['Yes', 'No']
    tags                VARCHAR[] NOT NULL,    -- the asset's ticker first, then the article's topic slugs
    asset               VARCHAR NOT NULL,
    kind                VARCHAR NOT NULL,      -- price_threshold | etf_decision | listing | upgrade_or_launch
    subject             VARCHAR,               -- exchange (listing), issuer (ETF), upgrade or product name
    comparator          VARCHAR,               -- above | below (price_threshold only)
    threshold           DOUBLE,
    currency            VARCHAR,
    resolution_criteria VARCHAR NOT NULL,
    resolution_source   VARCHAR NOT NULL,
    status              VARCHAR NOT NULL       -- open | closed, as of the last derivation (the API recomputes)
);
CREATE UNIQUE INDEX prediction_events_created_at ON prediction_events (created_at);

-- Every article that asks an event's question (the source included).
CREATE TABLE prediction_event_sources (
    event_id   VARCHAR NOT NULL,
    article_id VARCHAR NOT NULL,
    added_at   TIMESTAMP NOT NULL,
    PRIMARY KEY (event_id, article_id)
);
