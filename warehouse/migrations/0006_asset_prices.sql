-- Dated reference prices fetched from a public price source (the asset_reference_prices asset). Event
-- derivation reads them with the shipped table (pipeline/events/data/asset_reference.csv) for its price bands.
CREATE TABLE asset_prices (
    ticker     VARCHAR NOT NULL,
    day        DATE NOT NULL,
    usd        DOUBLE NOT NULL,
    source     VARCHAR NOT NULL,
    fetched_at TIMESTAMP NOT NULL,
    PRIMARY KEY (ticker, day)
);
