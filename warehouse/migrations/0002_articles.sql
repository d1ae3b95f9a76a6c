-- Enrichment: the curated articles table (sentiment + tags) and the analysts' long ticker table.
CREATE TABLE articles (
    id              VARCHAR PRIMARY KEY,
    source_name     VARCHAR NOT NULL,
    feed_url        VARCHAR NOT NULL,
    url             VARCHAR,
    title           VARCHAR NOT NULL,
    summary         VARCHAR NOT NULL,
    content_html    VARCHAR,
    authors         VARCHAR[] NOT NULL,
    categories      VARCHAR[] NOT NULL,
    image_url       VARCHAR,
    published_at    TIMESTAMP NOT NULL,
    fetched_at      TIMESTAMP NOT NULL,
    language        VARCHAR,
    content_hash    VARCHAR NOT NULL,
    sentiment       VARCHAR,             -- negative | neutral | positive
    sentiment_score DOUBLE,              -- P(positive) - P(negative), in [-1, 1]
    prob_negative   DOUBLE,
    prob_neutral    DOUBLE,
    prob_positive   DOUBLE,
    model_version   VARCHAR,
    enriched_at     TIMESTAMP,
    tickers         VARCHAR[],
    topics          VARCHAR[],
    tagger_version  VARCHAR,
    tagged_at       TIMESTAMP
);

CREATE TABLE article_tickers (
    article_id VARCHAR NOT NULL,
    ticker     VARCHAR NOT NULL,
    salience   DOUBLE NOT NULL,
    in_title   BOOLEAN NOT NULL,
    PRIMARY KEY (article_id, ticker)
);

CREATE TABLE crypto_assets (
    symbol          VARCHAR PRIMARY KEY,
    name            VARCHAR NOT NULL,
    aliases         VARCHAR[] NOT NULL,
    kind            VARCHAR NOT NULL,
    ambiguous       BOOLEAN NOT NULL,    -- symbol is also an English word or a company name
    former_symbols  VARCHAR[] NOT NULL   -- renames, e.g. POL <- MATIC
);
