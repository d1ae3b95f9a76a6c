-- The UTC offset (minutes east) a feed wrote an item's date in: "tomorrow" or "by year-end" in an article dated
-- Thu 31 Dec 2025 20:00 -0500 counts from December 31, not from the UTC day (January 1). Null: the feed gave no
-- zone, the date was inferred, or the row predates this column.
ALTER TABLE raw_articles ADD COLUMN published_offset SMALLINT;
ALTER TABLE articles ADD COLUMN published_offset SMALLINT;
