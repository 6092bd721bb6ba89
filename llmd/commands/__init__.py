"""Implementations of the CLI subcommands, imported lazily by llmd.cli."""
