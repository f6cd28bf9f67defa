"""CLI commands for profiling/ (placeholder until that part lands)."""
import typer


def register(app: typer.Typer) -> None:
    pass
