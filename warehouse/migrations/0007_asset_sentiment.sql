-- Sentiment over time (the asset_sentiment asset): per ticker, per hour and per day (grain), the articles that
-- mention it, by sentiment label, with the mean score. Only articles with a real publication date are counted
-- (date_inferred articles carry their fetch time, which says nothing about when the news happened).
CREATE TABLE asset_sentiment (
    ticker       VARCHAR NOT NULL,
    grain        VARCHAR NOT NULL,       -- hour | day
    bucket_start TIMESTAMP NOT NULL,     -- start of the hour or day (UTC); the bucket is [start, start + grain)
    articles     INTEGER NOT NULL,       -- articles mentioning the ticker (article_tickers rows)
    positive     INTEGER NOT NULL,
    neutral      INTEGER NOT NULL,
    negative     INTEGER NOT NULL,
    scored       INTEGER NOT NULL,       -- articles with a sentiment_score
    mean_score   DOUBLE,                 -- mean sentiment_score of those; null when none is scored
    updated_at   TIMESTAMP NOT NULL,
    PRIMARY KEY (ticker, grain, bucket_start)
);

-- What asset_sentiment last counted, one row per article and ticker. Comparing it with the current articles
-- tells which buckets new, changed, re-dated, re-tagged or deleted articles touched: only those are recomputed.
CREATE TABLE asset_sentiment_inputs (
    article_id      VARCHAR NOT NULL,
    ticker          VARCHAR NOT NULL,
    hour            TIMESTAMP NOT NULL,
    sentiment       VARCHAR,
    sentiment_score DOUBLE,
    PRIMARY KEY (article_id, ticker)
);
