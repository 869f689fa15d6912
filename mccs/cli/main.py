"""The `mccs` console script: one sub-command per module, each with add_arguments() and run()."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from mccs.daemon.service import configure_logging

# command -> (module, one-line help). Each module defines add_arguments(parser) and run(args) -> int.
COMMANDS = {
    "daemon": ("mccs.cli.daemon", "run a host's daemon in the foreground"),
    "send": ("mccs.cli.client", "SEND a message; prints its MSG_ID"),
    "recv": ("mccs.cli.client", "RECV a message; writes its data to stdout"),
    "request": ("mccs.cli.client", "send a request and wait for its reply (exit 1: none in time, 5: it failed)"),
    "reply": ("mccs.cli.client", "answer a request (its FROM_ID and MSG_ID, as mccs recv --json shows them)"),
    "status": ("mccs.cli.client", "lines and their state, list lengths, counters (--watch: live, like top)"),
    "ping": ("mccs.cli.client", "round trip to a host's daemon, and whether a process is attached there"),
    "queue": ("mccs.cli.queue", "the messages on the lists: list, show, hold, release, purge"),
    "line": ("mccs.cli.line", "make or end a call on a line that is a call through a modem: call, hangup"),
    "keys": ("mccs.cli.keys", "a host's end-to-end key and the hosts it trusts: init, show, trust, rotate, list"),
    "checkpoint": ("mccs.cli.checkpoint", "back up or check a host's checkpoint (while its daemon runs)"),
    "vserial": ("mccs.testbed.vserial", "virtual null-modem serial lines (pty pairs) with pacing and faults"),
    "loopback": ("mccs.testbed.loopback", "run N daemons over virtual lines, send traffic, check every message"),
    "analyze": ("mccs.analytics.command", "Spark analytics of trace files"),
    "bench": ("mccs.testbed.bench", "benchmarks: local, line, network, analyze, route, bulk, memory, calls"),
    "demo": ("mccs.testbed.demo", "the README's demo: a network of daemons, traffic, a Spark report"),
}



def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Only the chosen command's module is imported: `mccs send` need not load Spark's."""
    parser = argparse.ArgumentParser(
        prog="mccs",
        description="MCCS: store-and-forward messages between computers joined by serial lines.",
        epilog="Exit codes: 0 success, 1 nothing received, 2 usage or input error, 3 daemon not reachable "
               "or not answering, 4 not stored for now (disk full, or --timeout passed; nothing was sent), "
               "5 a request's reply said it failed. "
               "'mccs COMMAND --help' tells more.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            mod = importlib.import_module(module)
            add_arguments = getattr(mod, f"add_{name}_arguments", None) or mod.add_arguments
            add_arguments(p)
            p.set_defaults(_run=getattr(mod, f"run_{name}", getattr(mod, "run", None)))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    configure_logging((logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)])
    try:
        return args._run(args) or 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
