"""The ASGI app: GraphQL over serving snapshots, HTML-to-PDF, access keys and metering.

Never imports pipeline, models, torch, transformers or dagster: the server starts fast and small."""
