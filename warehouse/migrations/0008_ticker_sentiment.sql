-- Each ticker of an article gets its own sentiment (a headline can be good for one asset and bad for another),
-- and the asset registry's dates reach analysts: when an asset started trading and when it was renamed.
ALTER TABLE article_tickers ADD COLUMN sentiment VARCHAR;      -- Positive | Neutral | Negative; null until scored
ALTER TABLE article_tickers ADD COLUMN sentiment_score DOUBLE; -- P(positive) - P(negative) for this asset
ALTER TABLE crypto_assets ADD COLUMN since DATE;               -- first day it traded (under any symbol)
ALTER TABLE crypto_assets ADD COLUMN renamed DATE;             -- the day `symbol` replaced former_symbols[0]
