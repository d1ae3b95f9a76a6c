"""DuckDB warehouse: configuration, schema and migrations, the write side, snapshots, read-side queries."""
