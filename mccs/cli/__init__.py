"""The `mccs` command: one module a group of subcommands; main dispatches to them."""
from mccs.cli.main import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]
