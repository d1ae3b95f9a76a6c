-- When a derivation last produced each event. An open event whose source article was edited after that and that
-- nothing derives now stands (its source reports the outcome); one derived again after an edit that left it as it
-- was (a fix to the article's body) is withdrawn as any other when the rules stop deriving it.
ALTER TABLE prediction_events ADD COLUMN derived_at TIMESTAMP;
UPDATE prediction_events SET derived_at = updated_at;
