-- Analysts need to tell real publication dates from fetch times given to undated items (as raw_articles does);
-- the backfill also repairs articles whose date a later fetch corrected (the sync used to follow content only).
ALTER TABLE articles ADD COLUMN date_inferred BOOLEAN DEFAULT false;
UPDATE articles SET published_at = r.published_at, date_inferred = r.date_inferred
FROM raw_articles r WHERE r.id = articles.id;
