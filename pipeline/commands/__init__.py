"""CLI command modules. Top level imports typer and the standard library only."""
