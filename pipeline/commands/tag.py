"""`cryptowire tag`: the tickers and topics the tagger gives a headline, for checking a surprising tag."""

from __future__ import annotations

import sys

import typer

from pipeline.commands.output import json_option


def register(app: typer.Typer) -> None:
    @app.command("tag")
    def tag(
        text: str = typer.Option(None, "--text", "-t", help="One headline to tag (default: read headlines from stdin)."),
        summary: str = typer.Option("", "--summary", help="A summary to tag along with --text."),
        as_json: bool = json_option(help="Print JSON (tagger version, tickers with salience, topics)."),
    ) -> None:
        """Tag headlines with tickers and topics: --text, or one headline per line on stdin."""
        from models.tagging import get_tagger  # lazy: keeps `cryptowire --help` and other commands fast
        from pipeline.commands.output import emit_json, fail

        if text is not None:
            items = [(text, summary)]
        else:
            if summary:
                fail("--summary goes with --text; on stdin give one headline per line")
            if sys.stdin.isatty():
                fail("no headline given: pass --text 'HEADLINE' or pipe headlines, one per line, to stdin")
            items = [(line.strip(), "") for line in sys.stdin if line.strip()]
        if not items or not any(t.strip() for t, _ in items):
            fail("no headline given: the text is empty")

        from models.tagging.registry import RegistryError
        from models.tagging.topics import TaxonomyError

        try:
            tagger = get_tagger()
        except (RegistryError, TaxonomyError) as exc:  # the message names the file and the entry to fix
            fail(str(exc))
        results = []
        for headline, body in items:
            tags = tagger.tag(headline, body)
            results.append({
                "text": headline,
                "tickers": [{"symbol": h.symbol, "salience": h.salience, "in_title": h.in_title} for h in tags.tickers],
                "topics": tags.topics,
            })
        if as_json:
            emit_json({"tagger_version": tagger.version, "results": results})
            return
        for r in results:
            tickers = ", ".join(t["symbol"] for t in r["tickers"]) or "-"
            topics = ", ".join(r["topics"]) or "-"
            typer.echo(f"{r['text']}\n  tickers: {tickers}\n  topics:  {topics}")
