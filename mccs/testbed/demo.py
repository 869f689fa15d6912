"""`mccs demo`: the README's main job. Five hosts over virtual serial lines: AA hangs off BB by a
BSC line, and BB, CC, DD and EE form a ring of async lines that route, so that a message from
BB to DD crosses two hops and a cut line sends it the other way round. Traffic between any two
hosts that can reach each other runs for about a minute with line noise, cut lines and crashed
daemons; then the loopback verdict, what routing did (from the daemons' traces), and the
`mccs analyze` report of the traces with Spark."""
from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
from pathlib import Path

from mccs.analytics import spark_missing
from mccs.testbed.loopback import Options, print_verdict, run_network

CUT_EVERY, KILL_EVERY = 5.0, 7.0  # seconds: several of each while the traffic lasts
LINKS = ["AA-BB", "BB-CC", "CC-DD", "DD-EE", "EE-BB"]  # the first is BSC (protocol "mixed"), the others async


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
    print(f"MCCS demo: hosts AA to EE; AA-BB a BSC line, BB-CC-DD-EE-BB a ring of async lines that route; "
          f"{args.baud} baud, bit-error rate {args.ber:g}; traffic between any two hosts that reach each other; "
          f"one line cut every {CUT_EVERY:g} s, one daemon killed (kill -9) every {KILL_EVERY:g} s\n")
    verdict = run_network(Options(hosts=5, links=LINKS, routed=True, protocol="mixed", baud=args.baud, ber=args.ber,
                                  messages=args.messages, disconnect_every=CUT_EVERY, disconnect_for=2.0,
                                  kill_every=KILL_EVERY, timeout=180.0, dir=str(root / "network")))
    print()
    print_verdict(verdict)
    print()
    print_routing(verdict["trace_dirs"])
    if args.no_analyze:
        return 0 if verdict["ok"] else 1
    report = root / "report"
    print(f"\nSpark report of the traces (mccs analyze {' '.join(verdict['trace_dirs'])} --out {report})\n", flush=True)
    rc = subprocess.call([sys.executable, "-m", "mccs.cli", "analyze", *verdict["trace_dirs"], "--out", str(report)])
    return 0 if verdict["ok"] and rc == 0 else 1


def routing_story(trace_dirs: list[str]) -> dict:
    """From the traces: messages by lines crossed, one that crossed two with the hosts it was
    stored at, and the routes that moved to another neighbour (a cut line, and its return)."""
    events = [json.loads(line) for d in trace_dirs for path in sorted(Path(d).glob("*.jsonl"))
              for line in path.read_text().splitlines() if line.strip()]
    events.sort(key=lambda e: e.get("ts", 0))
    hops: collections.Counter = collections.Counter()
    seen_at: dict[tuple, list[str]] = collections.defaultdict(list)
    example = None
    routes: dict[tuple[str, str], str] = {}
    moved = []
    for e in events:
        key = (e.get("origin"), e.get("msg_id"))
        if e.get("type") == "msg" and e.get("kind") in ("accepted", "forwarded", "received"):
            if not seen_at[key] or seen_at[key][-1] != e["host"]:
                seen_at[key].append(e["host"])
            if e["kind"] == "received" and e.get("host") != e.get("origin"):
                hops[e.get("hops") or 1] += 1
                if example is None and (e.get("hops") or 1) >= 2:
                    example = (e["from_id"].rstrip(), e["to_id"].rstrip(), e["msg_id"], " > ".join(seen_at[key]))
        elif e.get("type") == "line" and e.get("kind") == "route" and e.get("distance") is not None:
            where = (e["host"], e["to"])
            if routes.get(where) not in (None, e["line"]):
                moved.append((e["host"], e["to"], routes[where], e["line"], e["distance"]))
            routes[where] = e["line"]
    return {"hops": dict(sorted(hops.items())), "example": example, "moved": moved}


def print_routing(trace_dirs: list[str], out=sys.stdout) -> None:
    story = routing_story(trace_dirs)
    print("What routing did (from the traces)", file=out)
    print("  messages by lines crossed: " + ", ".join(f"{n} line{'s' if n > 1 else ''}: {count}"
                                                     for n, count in story["hops"].items()), file=out)
    if story["example"]:
        sender, receiver, msg_id, path = story["example"]
        print(f"  e.g. {sender} to {receiver} (MSG_ID {msg_id}) was stored at {path}", file=out)
    print(f"  routes that moved to another neighbour: {len(story['moved'])}", file=out)
    for host, dest, old, new, dist in story["moved"][:3]:
        print(f"    {host}: messages for {dest} now go via {new}, not {old} ({dist} line{'s' if dist > 1 else ''})",
              file=out)
