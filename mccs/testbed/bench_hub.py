"""`mccs bench hub --leaves N --baud B`: what a message costs a hub (issue 36).

A star of N leaf daemons (L0, L1, ...) around one hub daemon (HB) over virtual lines. Each leaf
sends 128-byte messages to the next leaf (L0 to L1, ..., the last to L0) through the hub, so every
line carries a flow each way and the hub forwards every message. Measured, each run:

- each flow's goodput (message bytes a second, first SEND to its last RECV) as a share of the same
  line alone: two daemons over one line at the same baud, a flow each way at once, in the same run;
- the hub's CPU-seconds (user + system, /proc) per 1,000 forwarded messages, its passes and commits
  a message, and its resident memory at the end;
- the leaves' CPU-seconds per 1,000 messages each sent (and as many received).

Processes send with send_many and take with recv_many (`--batch`, 50), so that the leaves, which
share this machine's cores with the hub, spend as little as a process can.
Targets (issue 36): at most 0.4 CPU-s per 1,000 forwarded; with 8 leaves at 115,200 baud every
line at least 95% of its goodput alone.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path

from mccs.testbed.bench_network import daemon_pair
from mccs.testbed.hosts import DaemonProcess, start_all, stop_all, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.procstat import cpu_seconds, rss
from mccs.testbed.vserial import Lines

HUB = "HB"
SENDER, RECEIVER = "HSND", "HRCV"
CPU_TARGET, SHARE_TARGET = 0.4, 0.95


def leaves(n: int) -> list[str]:
    return [f"L{i}" for i in range(n)]


def star(root: Path, n: int, baud: int, protocol: str):
    """The hub and its leaves as daemon processes (entered), with static routes through the hub."""
    vl = Lines(str(root / "dev"), [f"{HUB}-{leaf}" for leaf in leaves(n)], baud=baud)
    keys = {"protocol": protocol, "baud": baud, **timers(min(baud, 115200))}
    hub = write_config(root, HUB, [{"peer": leaf, "port": vl.port(HUB, leaf), "role": "primary", **keys}
                                   for leaf in leaves(n)])
    configs = [hub] + [write_config(root, leaf, [{"peer": HUB, "port": vl.port(leaf, HUB), "role": "secondary",
                                                  **keys}],
                                    [{"to": other, "via": HUB} for other in leaves(n) if other != leaf])
                       for leaf in leaves(n)]
    return vl, [DaemonProcess(c) for c in configs]


def flows(pairs: list[tuple[DaemonProcess, DaemonProcess, str]], count: int, size: int, batch: int) -> list[float]:
    """Each (sender, receiver daemon, receiver's host) pair sends `count` messages at once with the
    others; each flow's message bytes a second from the common start to its own last RECV."""
    import mccs
    done: list[float | None] = [None] * len(pairs)
    errors: list[str] = []

    def send(config: Path, to: str) -> None:
        with mccs.connect(config, SENDER) as s:
            for i in range(0, count, batch):
                s.send_many([(to + RECEIVER, b"h" * size)] * min(batch, count - i))

    def recv(k: int, config: Path) -> None:
        with mccs.connect(config, RECEIVER, carry_confirms=True) as r:
            got = 0
            while got < count:
                n = len(r.recv_many(min(batch, count - got), timeout=120))
                if not n:
                    errors.append(f"flow {k}: {got} of {count} arrived")
                    return
                got += n
            done[k] = time.perf_counter()

    receivers = [threading.Thread(target=recv, args=(k, b.config), daemon=True) for k, (_, b, _) in enumerate(pairs)]
    for t in receivers:
        t.start()
    t0 = time.perf_counter()
    senders = [threading.Thread(target=send, args=(a.config, to), daemon=True) for a, _, to in pairs]
    for t in senders:
        t.start()
    for t in senders + receivers:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return [count * size / (end - t0) for end in done if end is not None]


def _warm(pairs: list[tuple[DaemonProcess, DaemonProcess, str]]) -> None:
    """One message on every flow first: every line up and every route in place before the clock runs."""
    flows(pairs, 1, 8, 1)


def hub_run(root: Path, n: int, baud: int, protocol: str, count: int, size: int, batch: int) -> dict:
    vl, daemons = star(root, n, baud, protocol)
    hub, ring = daemons[0], daemons[1:]
    with vl:
        start_all(daemons)
        try:
            pairs = [(ring[i], ring[(i + 1) % n], leaves(n)[(i + 1) % n]) for i in range(n)]
            _warm(pairs)
            before = {d.pid: cpu_seconds(d.pid) for d in daemons}
            c0 = hub.counters()
            goodputs = flows(pairs, count, size, batch)
            cpu = {d.pid: cpu_seconds(d.pid) - before[d.pid] for d in daemons}
            c1 = hub.counters()
            forwarded = n * count
            return {"goodputs": goodputs,
                    "hub_cpu_s_per_1000": cpu[hub.pid] * 1000 / forwarded,
                    "hub_passes_per_msg": (c1["passes"] - c0["passes"]) / forwarded,
                    "hub_commits_per_msg": (c1["commits"] - c0["commits"]) / forwarded,
                    "hub_rss_mb": rss(hub.pid) / 1e6,
                    "leaf_cpu_s_per_1000": statistics.mean(cpu[d.pid] for d in ring) * 1000 / count}
        finally:
            stop_all(daemons)


def alone_run(root: Path, baud: int, protocol: str, count: int, size: int, batch: int) -> float:
    """One line alone, a flow each way at once: the mean of the two flows' goodputs."""
    with daemon_pair(root, protocol, baud) as (a, b):
        pairs = [(a, b, "BB"), (b, a, "AA")]
        _warm(pairs)
        return statistics.mean(flows(pairs, count, size, batch))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    p.add_argument("--leaves", type=int, default=4, help="leaf daemons around the hub")
    p.add_argument("--baud", type=int, default=115200)
    p.add_argument("--protocol", default="async", choices=("async", "bsc"))
    p.add_argument("--messages", type=int, default=1000, help="messages each leaf sends")
    p.add_argument("--size", type=int, default=128, help="bytes of text a message")
    p.add_argument("--batch", type=int, default=50, help="messages a send_many and a recv_many")
    p.add_argument("--runs", type=int, default=3, help="runs; medians are reported")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    if not 2 <= args.leaves <= 36:
        raise SystemExit("mccs bench hub: --leaves must be 2 to 36")
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="mccs-bench-hub-") as tmp:
            alone = alone_run(Path(tmp) / "alone", args.baud, args.protocol, args.messages, args.size, args.batch)
            r = hub_run(Path(tmp) / "star", args.leaves, args.baud, args.protocol, args.messages, args.size,
                        args.batch)
        r["alone_goodput"] = alone
        r["shares"] = [g / alone for g in r.pop("goodputs")]
        r["min_share"] = min(r["shares"])
        runs.append(r)
        print(f"run {i + 1}: hub {r['hub_cpu_s_per_1000']:.3f} CPU-s / 1,000 forwarded, lines "
              + " ".join(f"{s:.1%}" for s in r["shares"]) + " of alone", flush=True)
    scalar = [k for k in runs[0] if k != "shares"]
    out = {"leaves": args.leaves, "baud": args.baud, "protocol": args.protocol, "runs": args.runs,
           **{k: round(statistics.median(r[k] for r in runs), 4) for k in scalar},
           "shares": [round(statistics.median(r["shares"][j] for r in runs), 4) for j in range(args.leaves)]}
    met = out["hub_cpu_s_per_1000"] <= CPU_TARGET and out["min_share"] >= SHARE_TARGET
    if args.json:
        print(json.dumps(out, indent=2))
        return 0 if met else 1
    print(f"\nmccs bench hub ({platform.node()}, {mp.cpu_count()} cores, Python {platform.python_version()}, "
          f"median of {args.runs}): {args.leaves} leaves at {args.baud} baud, {args.protocol}, "
          f"{args.messages} messages of {args.size} bytes from each leaf to the next through the hub")
    print(f"  each line's goodput, of the same line alone ({out['alone_goodput']:.0f} B/s a flow): "
          + "  ".join(f"L{j} {s:.1%}" for j, s in enumerate(out["shares"]))
          + f"  (target >= {SHARE_TARGET:.0%})")
    print(f"  hub: {out['hub_cpu_s_per_1000']:.3f} CPU-s per 1,000 forwarded (target <= {CPU_TARGET}), "
          f"{out['hub_passes_per_msg']:.2f} passes and {out['hub_commits_per_msg']:.2f} commits a message, "
          f"{out['hub_rss_mb']:.1f} MB resident")
    print(f"  leaves: {out['leaf_cpu_s_per_1000']:.3f} CPU-s per 1,000 messages sent (and as many received)")
    return 0 if met else 1
