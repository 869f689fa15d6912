"""`mccs bench network`: two daemons over a vserial line, for each protocol:

- durable messages per second end to end over an unpaced line (pty pair joined by a relay
  at a baud far above what the daemons can fill), 4 sender and 4 receiver processes;
- latency p50 and p99 at half that load (one paced sender, times carried in the messages);
- goodput of 128-byte messages at 9600 baud through the daemons, as a fraction of the line's
  framing ceiling (the definition of `mccs bench line`), beside the bare state machines'
  goodput measured in the same run: the daemons' cost in points of efficiency.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import platform
import statistics
import tempfile
import time
from pathlib import Path

from mccs.testbed.bench_local import message_rate
from mccs.testbed.hosts import DaemonProcess, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.vserial import Lines

UNPACED = 10_000_000  # baud of the "unpaced" line: the relay never waits


@contextlib.contextmanager
def daemon_pair(root: Path, protocol: str, baud: int, **line_keys):
    """Hosts AA and BB as daemon processes joined by one vserial line."""
    with Lines(str(root / "dev"), ["AA-BB"], baud=baud) as vl:
        keys = {"protocol": protocol, "baud": baud, **timers(min(baud, 115200)), **line_keys}
        a = DaemonProcess(write_config(root, "AA", [{"peer": "BB", "port": vl.port("AA", "BB"), "role": "primary",
                                                     **keys}]))
        b = DaemonProcess(write_config(root, "BB", [{"peer": "AA", "port": vl.port("BB", "AA"),
                                                     "role": "secondary", **keys}]))
        with a, b:
            _wait_up(a)
            yield a, b


def _wait_up(d: DaemonProcess, timeout: float = 30.0) -> None:
    import mccs
    with mccs.connect(d.config, "BNCH") as c:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(line["state"] == "UP" for line in c.status()["lines"]):
                return
            time.sleep(0.05)
    raise RuntimeError("the line did not come up")


def _paced_sender(config, rate, count, size, out):
    import mccs
    from mccs.testbed.traffic import encode
    with mccs.connect(config, "PACE") as c:
        t0 = time.perf_counter()
        for i in range(count):
            wait = t0 + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            c.send("BBLAT", encode(i, time.time(), size))
    out.put(None)


def latency(a: DaemonProcess, b: DaemonProcess, rate: float, count: int, size: int) -> tuple[float, float]:
    """SEND-to-RECV seconds at `rate` messages a second: p50, p99."""
    import mccs
    from mccs.testbed.traffic import decode
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    with mccs.connect(b.config, "LAT") as r:
        sender = ctx.Process(target=_paced_sender, args=(str(a.config), rate, count, size, out))
        sender.start()
        lat = []
        for _ in range(count):
            msg = r.recv(timeout=60)
            if msg is None:
                break
            lat.append(time.time() - decode(msg.data)[1])
        sender.join()
    q = statistics.quantiles(lat, n=100, method="inclusive")
    return q[49], q[98]


def goodput(a: DaemonProcess, b: DaemonProcess, count: int, size: int) -> float:
    """Message bytes a second through the daemons, from the first SEND to the last RECV."""
    import mccs
    with mccs.connect(a.config, "GS") as s, mccs.connect(b.config, "GR") as r:
        t0 = time.perf_counter()
        for _ in range(count):
            s.send("BBGR", b"g" * size)
        for _ in range(count):
            if r.recv(timeout=120) is None:
                raise RuntimeError("a message did not arrive")
        return count * size / (time.perf_counter() - t0)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    p.add_argument("--protocols", default="async,bsc", help="comma-separated")
    p.add_argument("--messages", type=int, default=1000, help="messages per sender for the throughput run")
    p.add_argument("--slow-messages", type=int, default=60, help="messages for the 9600-baud goodput run")
    p.add_argument("--runs", type=int, default=3, help="runs; medians are reported")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from mccs.testbed.bench_line import measure
    results = []
    for protocol in args.protocols.split(","):
        rates, p50s, p99s, goods = [], [], [], []
        for i in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="mccs-bench-") as tmp:
                with daemon_pair(Path(tmp) / "fast", protocol, UNPACED) as (a, b):
                    rates.append(message_rate(a.config, b.config, "BB", 4, args.messages, 128))
                    p50, p99 = latency(a, b, rates[-1] / 2, min(2000, int(rates[-1] * 5)), 128)
                    p50s.append(p50)
                    p99s.append(p99)
                with daemon_pair(Path(tmp) / "slow", protocol, 9600) as (a, b):
                    goods.append(goodput(a, b, args.slow_messages, 128))
            print(f"{protocol} run {i + 1}: {rates[-1]:7.0f} msg/s  p50 {p50s[-1] * 1000:6.1f} ms  "
                  f"p99 {p99s[-1] * 1000:6.1f} ms  9600-baud goodput {goods[-1]:6.1f} B/s", flush=True)
        bare = measure(protocol, 9600, 8 if protocol == "async" else None, args.slow_messages, args.runs, 1)
        good = statistics.median(goods)
        of_ceiling = good / (9600 / 10) / bare.ceiling
        results.append({"protocol": protocol, "messages_per_s": round(statistics.median(rates), 1),
                        "latency_p50_ms": round(statistics.median(p50s) * 1000, 2),
                        "latency_p99_ms": round(statistics.median(p99s) * 1000, 2),
                        "goodput_9600": round(good, 1), "of_ceiling": round(of_ceiling, 4),
                        "bare_of_ceiling": bare.of_ceiling,
                        "points_lost": round(100 * (bare.of_ceiling - of_ceiling), 2)})
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"\nmccs bench network ({platform.node()}, {mp.cpu_count()} cores, Python {platform.python_version()}, "
          f"median of {args.runs}; 128-byte messages)")
    print(f"{'protocol':8} {'msg/s unpaced':>13} {'p50 ms':>8} {'p99 ms':>8} {'9600 B/s':>9} {'of ceiling':>10} "
          f"{'bare':>7} {'points lost':>11}")
    for r in results:
        print(f"{r['protocol']:8} {r['messages_per_s']:13.0f} {r['latency_p50_ms']:8.1f} {r['latency_p99_ms']:8.1f} "
              f"{r['goodput_9600']:9.1f} {r['of_ceiling']:10.1%} {r['bare_of_ceiling']:7.1%} {r['points_lost']:11.2f}")
    print("targets: async >= 1000 msg/s unpaced; at 9600 baud no more than 3 points below the bare machines")
    return 0
