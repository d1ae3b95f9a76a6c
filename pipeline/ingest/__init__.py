"""Feed ingestion: feeds file, concurrent fetching, parsing, normalisation, and the merge into raw_articles.

Pure logic: no Dagster here (the asset in ``pipeline/assets`` calls :func:`ingest`).
"""

from pipeline.ingest.feeds import Feed, FeedsFileError, load_feeds
from pipeline.ingest.run import AllFeedsFailed, FeedResult, IngestReport, ingest

__all__ = ["AllFeedsFailed", "Feed", "FeedResult", "FeedsFileError", "IngestReport", "ingest", "load_feeds"]
