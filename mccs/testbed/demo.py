"""`mccs demo`: the README's main job. Three hosts over virtual serial lines (AA-BB BSC, AA-CC and
BB-CC async) carry traffic for under a minute with line noise, a cut line and a crashed daemon;
the loopback verdict is printed, then `mccs analyze` reports on the daemons' traces with Spark."""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from mccs.analytics import spark_missing
from mccs.testbed.loopback import Options, print_verdict, run_network

CUT_EVERY, KILL_EVERY = 5.0, 7.0  # seconds: several of each while the traffic lasts


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    p.add_argument("--dir", default="demo", help="where the run's configs, checkpoints, traces and report go "
                                                 "(emptied first)")
    p.add_argument("--messages", type=int, default=600, help="messages in all")
    p.add_argument("--baud", type=int, default=19200, help="speed of the virtual lines")
    p.add_argument("--ber", type=float, default=2e-5, help="bit-error rate of the virtual lines")
    p.add_argument("--no-analyze", action="store_true", help="skip the Spark report")


def run(args: argparse.Namespace) -> int:
    missing = None if args.no_analyze else spark_missing("mccs demo")
    if missing:                         # said before the network runs, not a minute later
        print(f"{missing}; or run it with --no-analyze", file=sys.stderr)
        return 2
    root = Path(args.dir).resolve()
    if root.exists():
        shutil.rmtree(root)
    print(f"MCCS demo: hosts AA, BB, CC; lines AA-BB (BSC), AA-CC and BB-CC (async) at {args.baud} baud, "
          f"bit-error rate {args.ber:g}; one line cut every {CUT_EVERY:g} s, one daemon killed (kill -9) "
          f"every {KILL_EVERY:g} s\n")
    verdict = run_network(Options(hosts=3, protocol="mixed", baud=args.baud, ber=args.ber, messages=args.messages,
                                  disconnect_every=CUT_EVERY, disconnect_for=2.0, kill_every=KILL_EVERY, timeout=120.0,
                                  dir=str(root / "network")))
    print()
    print_verdict(verdict)
    if args.no_analyze:
        return 0 if verdict["ok"] else 1
    report = root / "report"
    print(f"\nSpark report of the traces (mccs analyze {' '.join(verdict['trace_dirs'])} --out {report})\n", flush=True)
    rc = subprocess.call([sys.executable, "-m", "mccs.cli", "analyze", *verdict["trace_dirs"], "--out", str(report)])
    return 0 if verdict["ok"] and rc == 0 else 1
