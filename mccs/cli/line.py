"""`mccs line`: the operator's call on a line that is a call through a modem (docs/CALLS.md): make
one now, or end it. Through the daemon's socket; the call's state comes back as `mccs status`
shows it."""
from __future__ import annotations

import argparse
import json

from mccs.cli.client import EXIT_OK, _guard, _Usage, operator_options
from mccs.cli.queue import _host
from mccs.client import Client


def add_arguments(p: argparse.ArgumentParser) -> None:
    options = operator_options()
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, text in (("call", "call the peer now (the line's dial number), whether messages wait or not; "
                                  "a call that failed is tried again at once"),
                         ("hangup", "end the call now (the protocol signs off first); a call being made is "
                                    "given up, a retry waiting is called off (a message that still waits calls "
                                    "again)")):
        sub.add_parser(action, parents=[options], help=text).add_argument(
            "peer", metavar="HOST", type=_host, help="the host at the other end of the line")


@_guard
def run(args) -> int:
    if not args.config:
        raise _Usage("no config: give -c host.toml or set MCCS_CONFIG")
    with Client(args.config, None, connect_timeout=1.0, reconnect_timeout=1.0, grace=args.timeout) as client:
        reply = client.line(args.action, args.peer)
    if args.json:
        print(json.dumps(reply, indent=2))
    else:
        last = f", last call: {reply['last_call']}" if reply.get("last_call") else ""
        print(f"line to {reply['peer']}: {reply['call']}{last}")
    return EXIT_OK
