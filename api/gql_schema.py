"""The GraphQL schema, built in code with graphql-core; ``api/schema.graphql`` is its printed SDL.

Regenerate the SDL after a change: ``python -m api.gql_schema > api/schema.graphql`` (a test compares them).
Resolvers are not attached here: ``api.gql_exec`` resolves fields (its fast executor and graphql-core's, for
introspection, share the same functions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graphql import (
    GraphQLArgument,
    GraphQLBoolean,
    GraphQLEnumType,
    GraphQLEnumValue,
    GraphQLError,
    GraphQLField,
    GraphQLFloat,
    GraphQLID,
    GraphQLInt,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLScalarType,
    GraphQLSchema,
    GraphQLString,
    StringValueNode,
    ValueNode,
    print_schema,
)

from warehouse.cursors import CursorError, Instant, parse_instant

SDL_PATH = Path(__file__).with_name("schema.graphql")


def _serialize_datetime(value: Any) -> str:
    if isinstance(value, str):  # the read side hands out ISO strings already
        return value
    raise GraphQLError(f"DateTime cannot represent {value!r}")


def _parse_datetime(value: Any) -> Instant:
    if not isinstance(value, str):
        raise GraphQLError("DateTime must be an ISO 8601 date or timestamp string, e.g. 2024-12-01 or 2024-12-01T10:00:00Z")
    try:
        return parse_instant(value)
    except CursorError as exc:
        raise GraphQLError(f"DateTime: {exc}") from None


def _parse_datetime_literal(node: ValueNode, _variables: Any = None) -> Instant:
    # The node makes the error carry the value's location in the query (which argument it is).
    if not isinstance(node, StringValueNode):
        raise GraphQLError("DateTime must be an ISO 8601 date or timestamp string, e.g. \"2024-12-01\"", node)
    try:
        return _parse_datetime(node.value)
    except GraphQLError as exc:
        raise GraphQLError(exc.message, node) from None


DateTime = GraphQLScalarType(
    "DateTime",
    description="An ISO 8601 instant in UTC, e.g. `2024-12-01T10:00:00.000Z`. As an argument a plain date "
    "(`2024-12-01`) is accepted too; as an upper bound (`until`, `dateTo`) a plain date covers that whole day.",
    serialize=_serialize_datetime,
    parse_value=_parse_datetime,
    parse_literal=_parse_datetime_literal,
)

Sentiment = GraphQLEnumType(
    "Sentiment",
    {"Positive": GraphQLEnumValue("Positive"), "Negative": GraphQLEnumValue("Negative"),
     "Neutral": GraphQLEnumValue("Neutral")},
    description="The sentiment of an article, as the `sentiment` field spells it.",
)

EventStatus = GraphQLEnumType(
    "EventStatus",
    {"OPEN": GraphQLEnumValue("OPEN", description="The resolution date is still ahead."),
     "CLOSED": GraphQLEnumValue("CLOSED", description="The resolution date has passed."),
     "WITHDRAWN": GraphQLEnumValue(
         "WITHDRAWN", description="No article derives this question any more (see `withdrawnReason`); "
         "it stays listed under its id, which is never reused.")},
    description="Whether an event is withdrawn or its resolution date has passed, computed when the request is served.",
)


def _nn(t: Any) -> GraphQLNonNull:
    return GraphQLNonNull(t)


def _strings() -> GraphQLNonNull:
    return _nn(GraphQLList(_nn(GraphQLString)))


PageInfo = GraphQLObjectType(
    "PageInfo",
    {
        "hasNextPage": GraphQLField(_nn(GraphQLBoolean), description="More items follow endCursor (older)."),
        "hasPreviousPage": GraphQLField(_nn(GraphQLBoolean), description="Items precede startCursor (newer)."),
        "startCursor": GraphQLField(GraphQLString, description="The first edge's cursor; null when there are no edges."),
        "endCursor": GraphQLField(GraphQLString, description="The last edge's cursor; null when there are no edges."),
    },
)

TickerSentiment = GraphQLObjectType(
    "TickerSentiment",
    {
        "ticker": GraphQLField(_nn(GraphQLString)),
        "label": GraphQLField(GraphQLString, description="`Positive`, `Negative` or `Neutral`, for this asset."),
        "score": GraphQLField(GraphQLFloat, description="P(positive) - P(negative) for this asset, in [-1, 1]."),
    },
    description="The sentiment of an article for one of the assets it names: \"BTC rallies as ETH slides\" is "
                "positive for BTC and negative for ETH.",
)

StorySummary = GraphQLObjectType(
    "StorySummary",
    {
        "id": GraphQLField(_nn(GraphQLID), description="`st_` and 20 letters or digits; stable as articles join."),
        "title": GraphQLField(_nn(GraphQLString), description="The title of the story's earliest article."),
        "articleCount": GraphQLField(_nn(GraphQLInt)),
        "sourceCount": GraphQLField(_nn(GraphQLInt), description="Distinct sources that reported it."),
        "firstSeen": GraphQLField(_nn(DateTime), description="Publication time of its earliest article."),
    },
    description="The story an article belongs to: articles from different sources reporting the same news.",
)

News = GraphQLObjectType(
    "News",
    {
        "id": GraphQLField(_nn(GraphQLID), description="`a_` and 16 lower-case hexadecimal digits."),
        "title": GraphQLField(_nn(GraphQLString)),
        "text": GraphQLField(_nn(GraphQLString), description="The article's summary as plain text."),
        "sentiment": GraphQLField(GraphQLString, description="`Positive`, `Negative` or `Neutral`; null if not scored yet."),
        "sentimentScore": GraphQLField(GraphQLFloat, description="P(positive) - P(negative), in [-1, 1]."),
        "tickers": GraphQLField(_strings()),
        "tickerSentiments": GraphQLField(
            _nn(GraphQLList(_nn(TickerSentiment))),
            description="Each ticker's own sentiment, in the order of `tickers` (an article naming one asset gives it "
                        "the article's sentiment).",
        ),
        "topics": GraphQLField(_strings()),
        "sourceName": GraphQLField(_nn(GraphQLString)),
        "newsUrl": GraphQLField(GraphQLString),
        "imageUrl": GraphQLField(GraphQLString),
        "date": GraphQLField(_nn(DateTime), description="Publication time (UTC)."),
        "dateInferred": GraphQLField(
            _nn(GraphQLBoolean), description="True when the feed gave no publication time: `date` is then the time "
                                             "cryptowire first fetched the item (false in snapshots that predate it).",
        ),
        "story": GraphQLField(StorySummary, description="Its story; null in snapshots published before stories, "
                              "and for an article not grouped yet."),
    },
    description="A news article.",
)

NewsEdge = GraphQLObjectType(
    "NewsEdge", {"node": GraphQLField(_nn(News)), "cursor": GraphQLField(_nn(GraphQLString))}
)
NewsConnection = GraphQLObjectType(
    "NewsConnection",
    {"pageInfo": GraphQLField(_nn(PageInfo)), "edges": GraphQLField(_nn(GraphQLList(_nn(NewsEdge))))},
)

Story = GraphQLObjectType(
    "Story",
    {
        "id": GraphQLField(_nn(GraphQLID), description="`st_` and 20 letters or digits; stable as articles join."),
        "title": GraphQLField(_nn(GraphQLString), description="The title of its earliest article."),
        "firstSeen": GraphQLField(_nn(DateTime), description="Publication time of its earliest article."),
        "lastSeen": GraphQLField(_nn(DateTime), description="Publication time of its latest article."),
        "articleCount": GraphQLField(_nn(GraphQLInt)),
        "sourceCount": GraphQLField(_nn(GraphQLInt), description="Distinct sources that reported it."),
        "meanSentiment": GraphQLField(GraphQLFloat, description="Mean sentimentScore of its scored articles."),
        "tickers": GraphQLField(_strings(), description="Tickers any of its articles names."),
        "topics": GraphQLField(_strings()),
        "articleIds": GraphQLField(_nn(GraphQLList(_nn(GraphQLID))), description="Its articles, earliest first."),
    },
    description="Articles from different sources (and re-posts within one) reporting the same news within 48 hours.",
)

StoryEdge = GraphQLObjectType(
    "StoryEdge", {"node": GraphQLField(_nn(Story)), "cursor": GraphQLField(_nn(GraphQLString))}
)
StoryConnection = GraphQLObjectType(
    "StoryConnection",
    {"pageInfo": GraphQLField(_nn(PageInfo)), "edges": GraphQLField(_nn(GraphQLList(_nn(StoryEdge))))},
)

PredictionEvent = GraphQLObjectType(
    "PredictionEvent",
    {
        "id": GraphQLField(_nn(GraphQLID), description="`pevt_` and 20 letters or digits; stable."),
        "eventTitle": GraphQLField(_nn(GraphQLString)),
        "eventDescription": GraphQLField(_nn(GraphQLString)),
        "sourceUrl": GraphQLField(GraphQLString),
        "imageUrl": GraphQLField(GraphQLString),
        "createdAt": GraphQLField(_nn(DateTime), description="When the event was first derived; unique: the cursor."),
        "date": GraphQLField(_nn(DateTime), description="Resolution time (UTC)."),
        "options": GraphQLField(_strings()),
        "tags": GraphQLField(_strings()),
        "asset": GraphQLField(_nn(GraphQLString), description="The ticker the event is about."),
        "kind": GraphQLField(_nn(GraphQLString), description="price_threshold, etf_decision, listing, upgrade_or_launch, ..."),
        "subject": GraphQLField(GraphQLString, description="The exchange (listing), issuer (ETF), upgrade or product."),
        "comparator": GraphQLField(GraphQLString, description="For price events: above or below."),
        "threshold": GraphQLField(GraphQLFloat),
        "currency": GraphQLField(GraphQLString),
        "resolutionCriteria": GraphQLField(_nn(GraphQLString)),
        "resolutionSource": GraphQLField(_nn(GraphQLString)),
        "status": GraphQLField(_nn(EventStatus)),
        "withdrawnReason": GraphQLField(GraphQLString, description="Why the event is withdrawn; null otherwise."),
        "updatedAt": GraphQLField(DateTime, description="When the event last changed (its text or source, withdrawn "
                                  "or restored); equal to `createdAt` for an event never changed, and never "
                                  "earlier; null in snapshots published before it was kept."),
        "withdrawnAt": GraphQLField(DateTime, description="When the event was withdrawn; null otherwise."),
    },
    description="A binary prediction event derived from the news.",
)

PredictionEventEdge = GraphQLObjectType(
    "PredictionEventEdge",
    {"node": GraphQLField(_nn(PredictionEvent)), "cursor": GraphQLField(_nn(GraphQLString))},
)
PredictionEventConnection = GraphQLObjectType(
    "PredictionEventConnection",
    {"pageInfo": GraphQLField(_nn(PageInfo)), "edges": GraphQLField(_nn(GraphQLList(_nn(PredictionEventEdge))))},
)

Usage = GraphQLObjectType(
    "Usage",
    {
        "plan": GraphQLField(_nn(GraphQLString)),
        "cuUsedToday": GraphQLField(GraphQLInt, description="Compute units charged today (UTC)."),
        "cuRemainingToday": GraphQLField(GraphQLInt, description="Null when the plan has no daily limit."),
        "cuLimit": GraphQLField(GraphQLInt, description="The plan's daily allowance; null when unlimited."),
        "requestsPerSecond": GraphQLField(GraphQLFloat),
        "resetAt": GraphQLField(DateTime, description="When the daily allowance resets (next UTC midnight)."),
    },
    description="The calling key's plan and today's consumption. Querying it costs nothing.",
)


SentimentInterval = GraphQLEnumType(
    "SentimentInterval",
    {"HOUR": GraphQLEnumValue("HOUR", description="Hours (UTC); a range holds at most 744 (31 days)."),
     "DAY": GraphQLEnumValue("DAY", description="Days (UTC); a range holds at most 732 (2 years)."),
     "WEEK": GraphQLEnumValue("WEEK", description="Weeks from Monday 00:00 UTC, summed from the days; at most 262.")},
    description="The bucket size of a sentiment series.",
)

TrendWindow = GraphQLEnumType(
    "TrendWindow",
    {"HOUR": GraphQLEnumValue("HOUR", description="The latest hour, against the 168 hours before it."),
     "DAY": GraphQLEnumValue("DAY", description="The latest day (24 hours), against the 7 days before it.")},
    description="The window of a trending list, ending at the snapshot's newest dated article (at or before its "
    "publication: a date in the future never anchors).",
)

SentimentBucket = GraphQLObjectType(
    "SentimentBucket",
    {
        "start": GraphQLField(_nn(DateTime), description="The bucket is [start, end)."),
        "end": GraphQLField(_nn(DateTime)),
        "articles": GraphQLField(_nn(GraphQLInt), description="Articles mentioning the ticker (dated articles only)."),
        "positive": GraphQLField(_nn(GraphQLInt)),
        "neutral": GraphQLField(_nn(GraphQLInt)),
        "negative": GraphQLField(_nn(GraphQLInt)),
        "scored": GraphQLField(_nn(GraphQLInt), description="Articles with a sentiment score."),
        "meanScore": GraphQLField(GraphQLFloat, description="Mean sentimentScore of those; null when none is scored."),
    },
    description="One bucket of a sentiment series: only buckets with at least one article are listed.",
)

AssetSentiment = GraphQLObjectType(
    "AssetSentiment",
    {
        "ticker": GraphQLField(_nn(GraphQLString)),
        "interval": GraphQLField(_nn(SentimentInterval)),
        "since": GraphQLField(DateTime, description="Start of the first bucket of the range; null when the snapshot "
                              "has no dated article to anchor a default range to."),
        "until": GraphQLField(DateTime, description="End (exclusive) of the last bucket of the range."),
        "buckets": GraphQLField(_nn(GraphQLList(_nn(SentimentBucket))), description="Oldest first."),
    },
    description="A ticker's sentiment over time.",
)

TrendingItem = GraphQLObjectType(
    "TrendingItem",
    {
        "name": GraphQLField(_nn(GraphQLString), description="The ticker or topic."),
        "count": GraphQLField(_nn(GraphQLInt), description="Articles mentioning it in the latest window."),
        "baselineMean": GraphQLField(_nn(GraphQLFloat), description="Mean mentions per window over the baseline."),
        "baselineStd": GraphQLField(_nn(GraphQLFloat), description="Standard deviation per window over the baseline."),
        "ratio": GraphQLField(GraphQLFloat, description="count / baselineMean; null when the baseline has no mention."),
        "zScore": GraphQLField(_nn(GraphQLFloat), description="(count - baselineMean) / max(baselineStd, 1): the rank."),
    },
    description="An item mentioned more than usual in the latest window.",
)

Trending = GraphQLObjectType(
    "Trending",
    {
        "window": GraphQLField(_nn(TrendWindow)),
        "windowStart": GraphQLField(DateTime, description="The latest window is (windowStart, windowEnd]; null "
                                    "when the snapshot has no dated article."),
        "windowEnd": GraphQLField(DateTime, description="The snapshot's newest dated article at or before its "
                                  "publication."),
        "baselineStart": GraphQLField(DateTime, description="The baseline is (baselineStart, windowStart]."),
        "baselineWindows": GraphQLField(_nn(GraphQLInt), description="Windows in the baseline: 168 (HOUR) or 7 (DAY) once the data "
                                        "reaches back far enough, fewer before."),
        "minCount": GraphQLField(_nn(GraphQLInt), description="Mentions an item needs in the latest window."),
        "items": GraphQLField(_nn(GraphQLList(_nn(TrendingItem))), description="Highest zScore first."),
    },
    description="Items whose mentions in the latest window stand out against their own previous 7 days.",
)


def _page_args() -> dict[str, GraphQLArgument]:
    return {
        "after": GraphQLArgument(GraphQLString, description="A cursor, or an ISO date/timestamp: strictly older items."),
        "first": GraphQLArgument(GraphQLInt, description="Items from the start: 1 to 100 (default 10)."),
        "before": GraphQLArgument(GraphQLString, description="A cursor, or an ISO date/timestamp: strictly newer items."),
        "last": GraphQLArgument(GraphQLInt, description="Items from the end: 1 to 100; not with `first`."),
    }


def _string_list() -> GraphQLList:
    return GraphQLList(_nn(GraphQLString))


def _ids_doc(what: str, form: str) -> str:
    return (f"{what} with any of these ids ({form}; at most 100), with the other filters and paging as usual; an "
            "unknown id is simply absent, an empty list matches nothing.")


Query = GraphQLObjectType(
    "Query",
    {
        "cryptoNews": GraphQLField(
            _nn(NewsConnection),
            args={
                **_page_args(),
                "tickers": GraphQLArgument(_string_list(), description="Any of these tickers (case-insensitive)."),
                "topics": GraphQLArgument(_string_list(), description="Any of these topics (see `newsTopics`; case-insensitive)."),
                "sentiment": GraphQLArgument(Sentiment),
                "sources": GraphQLArgument(_string_list(), description="Any of these sources (see `newsSources`; case-insensitive)."),
                "since": GraphQLArgument(DateTime, description="Published at or after."),
                "until": GraphQLArgument(DateTime, description="Published at or before."),
                "search": GraphQLArgument(GraphQLString, description="Case-insensitive text in title or text."),
                "collapseStories": GraphQLArgument(
                    GraphQLBoolean, default_value=False,
                    description="One article per story (its earliest), so a story told by ten sources is listed once.",
                ),

                "ids": GraphQLArgument(_string_list(), description=_ids_doc("Articles", "`a_` and 16 lower-case hexadecimal digits")
                                       + " Not with `collapseStories`."),
            },
            description="News, newest first.",
        ),
        "stories": GraphQLField(
            _nn(StoryConnection),
            args={
                **_page_args(),
                "tickers": GraphQLArgument(_string_list(), description="Stories naming any of these tickers."),
                "topics": GraphQLArgument(_string_list(), description="Stories with any of these topics."),
                "since": GraphQLArgument(DateTime, description="First seen at or after."),
                "until": GraphQLArgument(DateTime, description="First seen at or before."),
                "minSources": GraphQLArgument(GraphQLInt, description="Reported by at least this many sources."),

                "ids": GraphQLArgument(_string_list(), description=_ids_doc("Stories", "`st_` and 20 letters or digits")),
            },
            description="Stories, newest (firstSeen) first. An empty list, free of charge, over a snapshot "
            "published before stories (`extensions.notes` says so).",
        ),
        "predictionEvents": GraphQLField(
            _nn(PredictionEventConnection),
            args={
                **_page_args(),
                "tickers": GraphQLArgument(_string_list(), description="Events about any of these tickers."),
                "tags": GraphQLArgument(_string_list(), description="Events with any of these tags."),
                "status": GraphQLArgument(EventStatus),
                "dateFrom": GraphQLArgument(DateTime, description="Resolution date at or after."),
                "dateTo": GraphQLArgument(DateTime, description="Resolution date at or before."),
                "updatedSince": GraphQLArgument(DateTime, description="Events that changed at or after this instant "
                                                "(new, edited, withdrawn or restored): what a client polls for."),

                "ids": GraphQLArgument(_string_list(), description=_ids_doc("Events", "`pevt_` and 20 letters or digits")),
            },
            description="Prediction events, newest (by createdAt) first.",
        ),
        "assetSentiment": GraphQLField(
            _nn(AssetSentiment),
            args={
                "ticker": GraphQLArgument(_nn(GraphQLString), description="A ticker, e.g. BTC (case-insensitive)."),
                "interval": GraphQLArgument(SentimentInterval, default_value="DAY"),
                "since": GraphQLArgument(DateTime, description="From the bucket holding this instant (default: "
                                         "30 days, 168 hours or 26 weeks before `until`)."),
                "until": GraphQLArgument(DateTime, description="To the bucket holding this instant (a plain date: "
                                         "that whole day; default: the newest dated article at or before the "
                                         "snapshot's publication)."),
            },
            description="A ticker's article counts by sentiment and mean score per hour, day or week, oldest first. "
            "Costs 1 per bucket the range may hold. Refused (503 `SNAPSHOT_PREDATES_FIELD`, free) over a snapshot "
            "published before sentiment buckets.",
        ),
        "trendingTickers": GraphQLField(
            _nn(Trending),
            args={"window": GraphQLArgument(TrendWindow, default_value="DAY"),
                  "first": GraphQLArgument(GraphQLInt, description="Items: 1 to 100 (default 10).")},
            description="Tickers mentioned more than usual in the latest window.",
        ),
        "trendingTopics": GraphQLField(
            _nn(Trending),
            args={"window": GraphQLArgument(TrendWindow, default_value="DAY"),
                  "first": GraphQLArgument(GraphQLInt, description="Items: 1 to 100 (default 10).")},
            description="Topics mentioned more than usual in the latest window.",
        ),
        "newsSources": GraphQLField(_strings(), description="Values for the `sources` filter."),
        "newsTopics": GraphQLField(_strings(), description="Values for the `topics` filter."),
        "tickers": GraphQLField(_strings(), description="Tickers seen in news or events."),
        "usage": GraphQLField(_nn(Usage), description="Your key's plan and today's usage (costs nothing)."),
    },
)

SCHEMA = GraphQLSchema(query=Query)


def sdl() -> str:
    return print_schema(SCHEMA) + "\n"


if __name__ == "__main__":
    print(sdl(), end="")
