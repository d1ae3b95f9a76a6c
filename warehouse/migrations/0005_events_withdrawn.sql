-- Events that the current rules no longer derive stay listed (ids are never reused or deleted) but are marked
-- withdrawn, with the reason, so the API can tell them apart. status: open | closed | withdrawn.
ALTER TABLE prediction_events ADD COLUMN withdrawn_reason VARCHAR;
ALTER TABLE prediction_events ADD COLUMN withdrawn_at TIMESTAMP;
