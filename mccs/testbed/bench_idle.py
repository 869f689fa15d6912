"""`mccs bench idle`: what a daemon costs while nothing is sent (issue 38).

N real daemons on a ring of vserial lines, every default of a user's config (9600 baud, the
default timers), started, their routes converged (the first host has a route to every other),
then left alone for a while after a settling time: each daemon's resident memory, and its CPU
seconds over the watch scaled to an hour (keepalives, the pass at each line's deadline).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import mccs
from mccs.testbed.bench_scale import host_ids
from mccs.testbed.hosts import DaemonProcess, wait_until, write_config
from mccs.testbed.procstat import cpu_seconds, rss
from mccs.testbed.vserial import Lines


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--daemons", type=int, default=40, help="daemons on the ring (default: %(default)s)")
    p.add_argument("--watch", type=float, default=120.0, help="seconds watched, idle (default: %(default)s)")
    p.add_argument("--settle", type=float, default=30.0, help="seconds after the routes converged before the "
                   "watch: the sign-ons' and updates' work is over (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="the figures as JSON")


def run(args: argparse.Namespace) -> int:
    if not 2 <= args.daemons <= 1000 or args.watch <= 0:
        print("mccs bench idle: --daemons must be 2 to 1000 and --watch positive", file=sys.stderr)
        return 2
    out = measure(args.daemons, args.watch, args.settle)
    print(json.dumps(out, indent=1) if args.json else
          f"mccs bench idle: {out['daemons']} daemons on a ring, every default, idle for {out['watched']:g} s\n"
          f"  started in {out['start_seconds']:g} s, routes converged {out['converge_seconds']:g} s later\n"
          f"  CPU-s a daemon-hour  median {out['cpu_s_per_hour']['median']:g}  max {out['cpu_s_per_hour']['max']:g}"
          f"  (all of them: {out['cores']:.3f} of a core)\n"
          f"  RSS a daemon         median {out['rss_mb']['median']:g} MB  max {out['rss_mb']['max']:g} MB"
          f"  (all of them: {out['rss_mb']['total']:,.0f} MB)")
    return 0


def measure(n: int, watch: float, settle: float) -> dict:
    ids = host_ids(n)
    links = [f"{a}-{b}" for a, b in zip(ids, ids[1:] + ids[:1])]
    root = Path(tempfile.mkdtemp(prefix="mccs-idle-"))
    daemons: list[DaemonProcess] = []
    t0 = time.monotonic()
    with Lines(str(root / "dev"), links, baud=9600) as vl:
        try:
            for h in ids:
                peers = [b if a == h else a for a, b in (link.split("-") for link in links) if h in (a, b)]
                daemons.append(DaemonProcess(write_config(root, h, [{"peer": p, "port": vl.port(h, p)}
                                                                    for p in peers])).start())
            started = time.monotonic()

            def converged() -> bool:
                with mccs.connect(daemons[0].config, None) as admin:
                    return sum(r["distance"] is not None for r in admin.status()["routes"]) == n - 1
            wait_until(converged, 600, "the routes of the ring")
            done = time.monotonic()
            time.sleep(settle)
            pids = [d.proc.pid for d in daemons if d.proc is not None]
            before, w0 = [cpu_seconds(p) for p in pids], time.monotonic()
            time.sleep(watch)
            after, w1 = [cpu_seconds(p) for p in pids], time.monotonic()
            mem = [rss(p) / 2**20 for p in pids]
        finally:
            for d in daemons:
                d.stop()
    per_hour = [(b - a) / (w1 - w0) * 3600 for a, b in zip(before, after)]
    return {"daemons": n, "watched": round(w1 - w0, 1), "start_seconds": round(started - t0, 1),
            "converge_seconds": round(done - started, 1),
            "cpu_s_per_hour": {"median": round(statistics.median(per_hour), 2), "max": round(max(per_hour), 2)},
            "cores": sum(per_hour) / 3600,
            "rss_mb": {"median": round(statistics.median(mem), 1), "max": round(max(mem), 1),
                       "total": round(sum(mem), 1)}}
