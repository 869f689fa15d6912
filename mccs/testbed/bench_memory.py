"""`mccs bench memory`: what moving one large message costs the daemons in memory.

Two daemons on one async vserial line; one large message of random bytes from a process on AA
to one on BB. Each daemon's resident set (VmRSS, sampled every 50 ms from /proc) is measured
idle, after sign-on, and at its peak while the message is handed over, carried and delivered.
The figure is (peak - idle) / message size per daemon; the target (issue 12) is under 3. The
rate of the transfer is reported against the line's capacity (baud/10 bytes a second).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

from mccs.testbed.procstat import rss as _rss

TARGET = 3.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=int, default=16 << 20, help="message bytes (default 16 MiB, the largest)")
    p.add_argument("--baud", type=int, default=4_000_000, help="line speed (default 4,000,000: 400 kB/s)")
    p.add_argument("--runs", type=int, default=1, help="runs; medians are reported")
    p.add_argument("--json", action="store_true", help="one JSON object")


def one_run(size: int, baud: int, seed: int) -> dict:
    import mccs
    from mccs.testbed.hosts import DaemonProcess, write_config
    from mccs.testbed.loopback import timers
    from mccs.testbed.vserial import Lines
    keys = {"protocol": "async", "baud": baud, **timers(baud)}
    root = Path(tempfile.mkdtemp(prefix="mccs-bench-memory-"))
    with Lines(str(root / "dev"), ["AA-BB"], baud=baud) as vl:
        daemons = {h: DaemonProcess(write_config(root, h, [{"peer": p, "port": vl.port(h, p), **keys}],
                                                 max_message=max(size, 128)))
                   for h, p in (("AA", "BB"), ("BB", "AA"))}
        try:
            for d in daemons.values():
                d.start()
            time.sleep(2.0)  # signed on
            idle = {h: _rss(d.pid) for h, d in daemons.items()}
            peak, stop = dict(idle), threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    for h, d in daemons.items():
                        peak[h] = max(peak[h], _rss(d.pid))
                    stop.wait(0.05)
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            data = random.Random(seed).randbytes(size)
            start = time.monotonic()
            with mccs.connect(daemons["AA"].config, "P") as p:
                p.send("BBR", data)
            del data
            with mccs.connect(daemons["BB"].config, "R") as r:
                got = r.recv(timeout=max(60.0, 30 * size * 10 / baud))
            seconds = time.monotonic() - start
            stop.set()
            sampler.join()
            if got is None or len(got.data) != size:
                raise RuntimeError("the message did not arrive whole")
        finally:
            for d in daemons.values():
                d.stop()
    return {"seconds": seconds, "efficiency": size / seconds / (baud / 10),
            **{f"{h}_idle_mib": idle[h] / 2 ** 20 for h in idle},
            **{f"{h}_above_idle": (peak[h] - idle[h]) / size for h in idle}}


def run(args: argparse.Namespace) -> int:
    runs = [one_run(args.size, args.baud, seed) for seed in range(args.runs)]
    result = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    result.update(size=args.size, baud=args.baud, runs=args.runs, target_above_idle=TARGET)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"one message of {args.size:,} bytes over async at {args.baud} baud, median of {args.runs}: "
              f"{result['seconds']:.1f} s, {result['efficiency']:.1%} of the line's capacity")
        for h, role in (("AA", "sender"), ("BB", "receiver")):
            ratio = result[f"{h}_above_idle"]
            print(f"  {h} ({role}): idle {result[f'{h}_idle_mib']:.1f} MiB, peak {ratio:.2f} x the message above "
                  f"idle (target < {TARGET:g}: {'met' if ratio < TARGET else 'MISSED'})")
    return 0 if all(result[f"{h}_above_idle"] < TARGET for h in ("AA", "BB")) else 1
