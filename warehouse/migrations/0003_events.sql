-- Derived prediction events.
CREATE TABLE prediction_events (
    id                  VARCHAR PRIMARY KEY,   -- 'pevt_' + 20 [A-Za-z0-9]
    event_title         VARCHAR NOT NULL,
    event_description   VARCHAR NOT NULL,
    source_url          VARCHAR,
    image_url           VARCHAR,
    source_article_id   VARCHAR NOT NULL,
    created_at          TIMESTAMP NOT NULL,    -- millisecond precision, unique: the API cursor
    date                TIMESTAMP NOT NULL,    -- resolution time (UTC)
    options             VARCHAR[] NOT NULL,
    tags                VARCHAR[] NOT NULL,
    asset               VARCHAR NOT NULL,
    kind                VARCHAR NOT NULL,
    comparator          VARCHAR,
    threshold           DOUBLE,
    currency            VARCHAR,
    resolution_criteria VARCHAR NOT NULL,
    resolution_source   VARCHAR NOT NULL,
    status              VARCHAR NOT NULL       -- open | closed, as of the last derivation (the API recomputes)
);
CREATE UNIQUE INDEX prediction_events_created_at ON prediction_events (created_at);

CREATE TABLE prediction_event_sources (
    event_id   VARCHAR NOT NULL,
    article_id VARCHAR NOT NULL,
    added_at   TIMESTAMP NOT NULL,
    PRIMARY KEY (event_id, article_id)
);
