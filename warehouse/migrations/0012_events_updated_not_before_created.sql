-- updated_at was the run's clock while created_at is pushed ahead to stay unique (warehouse/events.py), so a new
-- event could look changed before it existed. An event never changed has updated_at = created_at from now on.
UPDATE prediction_events SET updated_at = created_at WHERE updated_at < created_at;
