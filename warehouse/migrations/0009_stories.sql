-- Stories (the stories asset): articles reporting the same news, grouped. Every article belongs to exactly one
-- story (a story of one article too); a story's id derives from its first article's and never changes.
-- Embeddings are computed once per article and encoder version (the grouping compares them, never the text again).
CREATE TABLE article_embeddings (
    article_id    VARCHAR PRIMARY KEY,
    encoder       VARCHAR NOT NULL,      -- pipeline.stories.features.ENCODER_VERSION
    text_vec      FLOAT[] NOT NULL,      -- L2-normalised embedding of the title and the start of the summary
    title_vec     FLOAT[] NOT NULL,      -- ... of the title alone
    numbers       VARCHAR[] NOT NULL,    -- normalised numbers of title + lede ($1.2 billion -> 1.2e+09)
    title_numbers VARCHAR[] NOT NULL,
    computed_at   TIMESTAMP NOT NULL
);

CREATE TABLE story_articles (
    article_id   VARCHAR PRIMARY KEY,
    story_id     VARCHAR NOT NULL,
    published_at TIMESTAMP NOT NULL,     -- as grouped (the window is over publication times)
    added_at     TIMESTAMP NOT NULL
);

CREATE TABLE stories (
    id             VARCHAR PRIMARY KEY,  -- st_ + 20 of [A-Za-z0-9]
    title          VARCHAR NOT NULL,     -- the earliest article's title
    first_seen     TIMESTAMP NOT NULL,
    last_seen      TIMESTAMP NOT NULL,
    articles       INTEGER NOT NULL,
    sources        INTEGER NOT NULL,     -- distinct source names
    mean_sentiment DOUBLE,               -- mean sentiment_score of the scored articles; null when none is
    tickers        VARCHAR[] NOT NULL,   -- union of the articles' tickers
    topics         VARCHAR[] NOT NULL,
    updated_at     TIMESTAMP NOT NULL
);
