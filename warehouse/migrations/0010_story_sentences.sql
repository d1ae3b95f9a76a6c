-- Stories compare two articles sentence by sentence too (pipeline.stories.features.sentences): the title's and the
-- first summary sentences' embeddings, one after another in one flat list (384 floats each). Rows of an older
-- encoder version have none and are embedded again by the next stories run, as the encoder column says.
ALTER TABLE article_embeddings ADD COLUMN sent_vecs FLOAT[];
