"""The Dagster code location (assets, resources, checks, schedules) and the `cryptowire` CLI."""
