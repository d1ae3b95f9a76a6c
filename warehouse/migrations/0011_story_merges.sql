-- Two stories that a later article reports both are merged (pipeline.stories.cluster, "bridging"): the story seen
-- first keeps its id, the other's articles move to it and its id is retired. Retired ids stay listed here, with
-- the story they are part of now, so that an id once published can still be followed.
CREATE TABLE story_merges (
    story_id    VARCHAR PRIMARY KEY,  -- the retired id
    merged_into VARCHAR NOT NULL,     -- a live story id (kept current when that story is merged in turn)
    merged_at   TIMESTAMP NOT NULL
);
