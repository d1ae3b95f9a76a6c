-- What event derivation made of each article, so that a run derives only the articles whose inputs changed
-- (pipeline.events.memo). `fingerprint` names the rules, the price model, the registry and the reference prices
-- the result came from: rows of another fingerprint are derived again. Internal: analysts read prediction_events.
CREATE TABLE event_memo (
    article_id  VARCHAR NOT NULL,
    input_hash  UBIGINT NOT NULL,   -- hash of the article columns derivation reads
    fingerprint VARCHAR NOT NULL,
    candidate   VARCHAR,            -- the derived event as JSON, or null
    refused     VARCHAR             -- {event id: reason} of questions a check refused, as JSON, or null
);
