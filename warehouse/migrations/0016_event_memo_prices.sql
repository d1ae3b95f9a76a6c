-- The reference prices (asset_prices) the event memo's results were derived with: a price added or changed since
-- makes stale only the articles whose checks read it (those naming the ticker from its previous price day on), not
-- all. event_memo's fingerprint covers the shipped reference table only since this migration.
CREATE TABLE event_memo_prices (
    ticker VARCHAR NOT NULL,
    day    DATE NOT NULL,
    usd    DOUBLE NOT NULL
);
