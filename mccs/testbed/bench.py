"""`mccs bench KIND`: each benchmark lives in mccs/testbed/bench_KIND.py with add_arguments() and run()."""
from __future__ import annotations

import argparse
import importlib

KINDS = {
    "local": "durable SEND-to-RECV messages per second on one host against raw SQLite commits",
    "line": "goodput of a bare line state machine over a paced vserial line",
    "network": "end-to-end throughput and latency through daemons over serial lines",
    "analyze": "Spark analytics events per second from JSON Lines and Parquet",
    "route": "multi-hop goodput, latency per hop and reroute time through daemons over 9600-baud lines",
    "bulk": "one bulk transfer: MCCS async and BSC against ZMODEM and UUCP 'i' over the same paced line",
    "memory": "the daemons' memory while one large message (16 MiB) is carried over a line",
    "calls": "what a call costs on a demand line over emulated Hayes modems: set-up, bytes, data share",
    "hub": "a hub daemon forwarding between N leaves: each line's goodput against alone, the hub's CPU a message",
    "scale": "a network of any size in memory: convergence after cuts and kills, routing bytes a line, exactly once",
    "idle": "what an idle daemon costs: N daemons on a ring with every default, their memory and CPU an hour",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    for kind, help_text in KINDS.items():
        p = sub.add_parser(kind, help=help_text, description=help_text)
        p.set_defaults(_bench=f"mccs.testbed.bench_{kind}")
        try:
            importlib.import_module(f"mccs.testbed.bench_{kind}").add_arguments(p)
        except ModuleNotFoundError:
            p.set_defaults(_missing=True)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "_missing", False):
        print(f"mccs bench {args.kind}: not built yet")
        return 2
    return importlib.import_module(args._bench).run(args) or 0
