"""`mccs bench network`: two daemons over a vserial line, for each protocol:

- durable messages per second end to end over an unpaced line (pty pair joined by a relay
  at a baud far above what the daemons can fill), 4 sender and 4 receiver processes;
- latency p50 and p99 at half that load (one paced sender, times carried in the messages);
- goodput of 128-byte messages at 9600 baud through the daemons, as a fraction of the line's
  framing ceiling (the definition of `mccs bench line`), beside the bare state machines'
  goodput measured in the same run: the daemons' cost in points of efficiency;
- CPU: the daemons' CPU seconds (user + system, from /proc) per 1,000 128-byte messages
  delivered over a 115200-baud line, each daemon apart; one message a SEND and a RECV, then
  again with send_many and recv_many of 50; beside them what the commits alone cost
  (mccs.testbed.commit_cost: a simulated pair's, replayed on disk) and a raw durable commit;
- idle: a daemon with two lines up and nothing to send (default timers): its share of a core
  and its resident memory, first started and again after a restart;
- urgent: at 9600 baud with hundreds of 100-byte messages queued, priority-7 messages sent one
  at a time: how long each waits beyond its own frame's time on the wire, against one bulk frame.
Targets: (issue 15) under 0.5 CPU-seconds per 1,000 messages per daemon; idle under 1% of a
core and under 40 MB; (issue 14) an urgent message waits no longer than one bulk frame.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import multiprocessing as mp
import platform
import statistics
import tempfile
import time
from pathlib import Path

from mccs.testbed.bench_local import message_rate, raw_commits
from mccs.testbed.commit_cost import commit_cost
from mccs.testbed.hosts import DaemonProcess, give_keys, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.procstat import cpu_seconds, rss
from mccs.testbed.vserial import Lines

UNPACED = 10_000_000  # baud of the "unpaced" line: the relay never waits
PARTS = ("rate", "goodput", "cpu", "idle", "urgent", "crypto")
CPU_TARGET = 0.5  # CPU-seconds per 1,000 messages per daemon (one message a SEND and a RECV)
CPU_BATCH = 50  # the CPU part again with send_many and recv_many of this many
IDLE_CPU_TARGET, IDLE_RSS_TARGET = 0.01, 40e6  # share of a core, bytes


@contextlib.contextmanager
def daemon_pair(root: Path, protocol: str, baud: int, e2e: str = "off", **line_keys):
    """Hosts AA and BB as daemon processes joined by one vserial line; with `e2e` sign or seal,
    each has a key and trusts the other's (docs/E2E.md)."""
    with Lines(str(root / "dev"), ["AA-BB"], baud=baud) as vl:
        keys = {"protocol": protocol, "baud": baud, **timers(min(baud, 115200)), **line_keys}
        configs = [write_config(root, "AA", [{"peer": "BB", "port": vl.port("AA", "BB"), "role": "primary", **keys}],
                                e2e=e2e),
                   write_config(root, "BB", [{"peer": "AA", "port": vl.port("BB", "AA"), "role": "secondary", **keys}],
                                e2e=e2e)]
        if e2e != "off":
            give_keys(configs)
        a, b = (DaemonProcess(c) for c in configs)
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


def cpu_per_message(a: DaemonProcess, b: DaemonProcess, count: int, size: int, batch: int = 1) -> dict:
    """Each daemon's CPU seconds per 1,000 messages sent by one process and RECVed by another
    (receiving while the SENDs go on), from before the first SEND to after the last RECV; and
    its passes and commits per message (`mccs status` counters), which is where the CPU goes.
    `batch` > 1: the sender uses send_many of that many, the receiver recv_many with its confirms
    carried by the next request (keys end in `_batched`)."""
    import threading

    import mccs

    def send(s) -> None:
        for i in range(0, count, batch):
            if batch > 1:
                s.send_many([("BBCR", b"c" * size)] * min(batch, count - i))
            else:
                s.send("BBCR", b"c" * size)

    def recv(r, most: int) -> int:
        """How many messages one request received."""
        if batch > 1:
            return len(r.recv_many(most, timeout=120))
        return int(r.recv(timeout=120) is not None)

    daemons = {"AA": a, "BB": b}
    before = {h: (cpu_seconds(d.pid), d.counters()) for h, d in daemons.items()}
    with mccs.connect(a.config, "CS") as s, mccs.connect(b.config, "CR", carry_confirms=batch > 1) as r:
        sender = threading.Thread(target=send, args=(s,), daemon=True)
        sender.start()
        got = 0
        while got < count:
            n = recv(r, min(batch, count - got))
            if not n:
                raise RuntimeError("a message did not arrive")
            got += n
        sender.join()
    out, tag = {}, "_batched" if batch > 1 else ""
    for h, d in daemons.items():
        cpu0, c0 = before[h]
        c1 = d.counters()
        out[f"cpu_s_per_1000_{h}{tag}"] = (cpu_seconds(d.pid) - cpu0) * 1000 / count
        out[f"passes_per_msg_{h}{tag}"] = (c1["passes"] - c0["passes"]) / count
        out[f"commits_per_msg_{h}{tag}"] = (c1["commits"] - c0["commits"]) / count
    return out


def urgent_wait(a: DaemonProcess, b: DaemonProcess, queued: int, samples: int) -> dict:
    """Seconds each of `samples` priority-7 messages, sent while `queued` 100-byte messages wait on
    AA's SEND_LIST, waits beyond its own frame's wire time (SEND to RECV, commits included), and
    the wire time of one bulk frame (text, routing envelope, image header, framing)."""
    import mccs
    baud = 9600
    frame = lambda size: (size + 15 + 16 + 10) * 10 / baud  # noqa: E731 - as tests/integration/test_priority_daemons.py
    waits = []
    with mccs.connect(a.config, "US") as s, mccs.connect(b.config, "UR") as r:
        for i in range(queued):
            s.send("BBBULK", b"bulk %04d " % i + bytes(90))
        deadline = time.monotonic() + 30
        while s.status()["lists"]["send"] > queued - 10:  # the bulk flows at its steady pace
            if time.monotonic() > deadline:
                raise RuntimeError("the bulk does not flow")
            time.sleep(0.1)
        for i in range(samples):
            time.sleep(0.5 + 0.37 * i % 0.3)  # land at different points of the frame on the wire
            t0 = time.monotonic()
            s.send("BBUR", b"urgent", 7000 + i, priority=7)
            if r.recv(user_id=7000 + i, timeout=60) is None:
                raise RuntimeError("an urgent message did not arrive")
            waits.append(time.monotonic() - t0 - frame(6))
    return {"urgent_wait_ms_median": 1000 * statistics.median(waits), "urgent_wait_ms_max": 1000 * max(waits),
            "bulk_frame_ms": 1000 * frame(100)}


def idle_cost(root: Path, protocol: str, seconds: float) -> dict:
    """Host BB with lines to AA and CC, all UP, default timers, nothing to send: BB's share of a
    core over `seconds` and its resident bytes, as first started on a fresh checkpoint and again
    after a restart on it (which does not load what only creating a checkpoint needs)."""
    with Lines(str(root / "dev"), ["AA-BB", "BB-CC"], baud=115200) as vl:
        keys = {"protocol": protocol, "baud": 115200}
        hosts = {"AA": [("BB", "secondary")], "BB": [("AA", "primary"), ("CC", "primary")], "CC": [("BB", "secondary")]}
        daemons = [DaemonProcess(write_config(root, h, [{"peer": p, "port": vl.port(h, p), "role": role, **keys}
                                                        for p, role in peers]))
                   for h, peers in hosts.items()]
        out = {}
        with contextlib.ExitStack() as stack:
            for d in daemons:
                stack.enter_context(d)
            bb = daemons[1]
            for when in ("fresh", "restarted"):
                if when == "restarted":
                    bb.stop()
                    bb.start()
                _wait_up(bb)
                time.sleep(2.0)  # the sign-on's routes and traces settle
                t0, c0 = time.monotonic(), cpu_seconds(bb.pid)
                time.sleep(seconds)
                out[f"idle_core_share_{when}"] = (cpu_seconds(bb.pid) - c0) / (time.monotonic() - t0)
                out[f"idle_rss_mb_{when}"] = rss(bb.pid) / 1e6
        return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    p.add_argument("--protocols", default="async,bsc", help="comma-separated")
    p.add_argument("--messages", type=int, default=1000, help="messages per sender for the throughput run")
    p.add_argument("--slow-messages", type=int, default=60, help="messages for the 9600-baud goodput run")
    p.add_argument("--cpu-messages", type=int, default=2000, help="messages for the CPU run at 115200 baud")
    p.add_argument("--urgent", type=int, default=20, help="priority-7 messages timed in the urgent part")
    p.add_argument("--idle-seconds", type=float, default=20.0,
                   help="how long the idle daemon is watched (twice: fresh, then restarted)")
    p.add_argument("--parts", default=",".join(PARTS),
                   help="comma-separated, of: rate (unpaced msg/s and latency), goodput (9600 baud), "
                        "cpu (per 1,000 messages at 115200), idle (a daemon with two lines), crypto (the "
                        "end-to-end construction alone, with --e2e), "
                        "urgent (priority 7 behind a queue at 9600 baud)")
    p.add_argument("--runs", type=int, default=3, help="runs; medians are reported")
    p.add_argument("--e2e", default="off", help="comma-separated, of off, sign, seal: each protocol with each, "
                                                "side by side (both daemons protect end to end: docs/E2E.md)")
    p.add_argument("--json", action="store_true")


def one_run(protocol: str, parts: set[str], args: argparse.Namespace, e2e: str = "off") -> dict:
    """The parts asked for, once, each on fresh daemons."""
    out = {}
    pair = functools.partial(daemon_pair, e2e=e2e)
    with tempfile.TemporaryDirectory(prefix="mccs-bench-") as tmp:
        root = Path(tmp)
        if "rate" in parts:
            with pair(root / "fast", protocol, UNPACED) as (a, b):
                out["messages_per_s"] = rate = message_rate(a.config, b.config, "BB", 4, args.messages, 128)
                out["latency_p50_ms"], out["latency_p99_ms"] = (
                    1000 * q for q in latency(a, b, rate / 2, min(2000, int(rate * 5)), 128))
        if "goodput" in parts:
            with pair(root / "slow", protocol, 9600) as (a, b):
                out["goodput_9600"] = goodput(a, b, args.slow_messages, 128)
        if "cpu" in parts:
            out["raw_commit_cpu_us"] = 1e6 * raw_commits(root / "raw.db").cpu_s  # beside the checkpoints
            out.update(commit_cost(protocol, args.cpu_messages))
            with pair(root / "cpu", protocol, 115200) as (a, b):
                out.update(cpu_per_message(a, b, args.cpu_messages, 128))
                out.update(cpu_per_message(a, b, args.cpu_messages, 128, CPU_BATCH))
        if "idle" in parts:
            out.update(idle_cost(root / "idle", protocol, args.idle_seconds))
        if "urgent" in parts:
            with pair(root / "urgent", protocol, 9600) as (a, b):
                out.update(urgent_wait(a, b, 300, args.urgent))
        if "crypto" in parts and e2e != "off":
            out.update(crypto_cost(e2e, 20_000, 128))
    return out


def crypto_cost(e2e: str, count: int, size: int) -> dict:
    """The construction alone (mccs.core.e2e), in this process: microseconds to protect a message
    at its origin and to open it at its destination."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from mccs.core import e2e as e
    ka, kb = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    origin = e.Keyring("AA", [ka], {"BB": [e.public_bytes(kb)]})
    dest = e.Keyring("BB", [kb], {"AA": [e.public_bytes(ka)]})
    mode, text = e.SETTING[e2e], bytes(size)
    headers = [e.Header("BBRECV", "AASEND", i & 0xFFFF, 0, 0, 0, "01020304", i + 1) for i in range(count)]
    t0 = time.perf_counter()
    sealed = [e.protect(origin, mode, h, 600, text) for h in headers]
    t1 = time.perf_counter()
    for h, (out, trailer) in zip(headers, sealed):
        e.open_(dest, h, 600, out, trailer)
    t2 = time.perf_counter()
    return {"protect_us": (t1 - t0) / count * 1e6, "open_us": (t2 - t1) / count * 1e6}


def run(args: argparse.Namespace) -> int:
    from mccs.testbed.bench_line import measure
    parts = set(args.parts.split(","))
    if not parts <= set(PARTS):
        raise SystemExit(f"mccs bench network: unknown part(s) {', '.join(sorted(parts - set(PARTS)))}; "
                         f"choose from {', '.join(PARTS)}")
    results, met = [], True
    for protocol, e2e in ((p, e) for p in args.protocols.split(",") for e in args.e2e.split(",")):
        runs = []
        label = protocol if e2e == "off" else f"{protocol} e2e={e2e}"
        for i in range(args.runs):
            runs.append(one_run(protocol, parts, args, e2e))
            print(f"{label} run {i + 1}: " + "  ".join(f"{k} {v:.4g}" for k, v in runs[-1].items()), flush=True)
        r = {"protocol": protocol, "e2e": e2e,
             **{k: round(statistics.median(x[k] for x in runs), 4) for k in runs[0]}}
        if "goodput" in parts:
            bare = measure(protocol, 9600, 8 if protocol == "async" else None, args.slow_messages, args.runs, 1)
            r["of_ceiling"] = round(r["goodput_9600"] / (9600 / 10) / bare.ceiling, 4)
            r["bare_of_ceiling"] = bare.of_ceiling
            r["points_lost"] = round(100 * (bare.of_ceiling - r["of_ceiling"]), 2)
        if "cpu" in parts:
            met &= max(r["cpu_s_per_1000_AA"], r["cpu_s_per_1000_BB"]) < CPU_TARGET
        if "idle" in parts:
            met &= all(r[f"idle_core_share_{w}"] < IDLE_CPU_TARGET and r[f"idle_rss_mb_{w}"] * 1e6 < IDLE_RSS_TARGET
                       for w in ("fresh", "restarted"))
        if "urgent" in parts:
            met &= r["urgent_wait_ms_median"] <= r["bulk_frame_ms"]
        results.append(r)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0 if met else 1
    print(f"\nmccs bench network ({platform.node()}, {mp.cpu_count()} cores, Python {platform.python_version()}, "
          f"median of {args.runs}; 128-byte messages)")
    for r in results:
        print(f"{r['protocol']}" + (f", e2e = {r['e2e']}:" if r["e2e"] != "off" else ":"))
        if "rate" in parts:
            print(f"  unpaced: {r['messages_per_s']:.0f} msg/s; at half that load p50 {r['latency_p50_ms']:.1f} ms, "
                  f"p99 {r['latency_p99_ms']:.1f} ms (target: async >= 1000 msg/s)")
        if "goodput" in parts:
            print(f"  9600 baud: {r['goodput_9600']:.1f} B/s, {r['of_ceiling']:.1%} of the framing ceiling, bare "
                  f"machines {r['bare_of_ceiling']:.1%}: {r['points_lost']:.2f} points lost (target <= 3)")
        if "cpu" in parts:
            print(f"  CPU per 1,000 messages at 115200: AA (sender) {r['cpu_s_per_1000_AA']:.3f} s, BB (receiver) "
                  f"{r['cpu_s_per_1000_BB']:.3f} s (target < {CPU_TARGET} s per daemon); passes / commits a "
                  f"message: AA {r['passes_per_msg_AA']:.2f} / {r['commits_per_msg_AA']:.2f}, "
                  f"BB {r['passes_per_msg_BB']:.2f} / {r['commits_per_msg_BB']:.2f}")
            print(f"  of which the commits (a simulated pair's, replayed on disk): AA {r['commit_cpu_us_full_AA']:.0f} "
                  f"us of its {r['cpu_s_per_1000_AA'] * 1000:.0f} a message, BB {r['commit_cpu_us_full_BB']:.0f} of "
                  f"{r['cpu_s_per_1000_BB'] * 1000:.0f} ({r['commits_per_msg_sim_AA']:.2f} / "
                  f"{r['commits_per_msg_sim_BB']:.2f} commits a message; {r['commit_cpu_us_normal_AA']:.0f} / "
                  f"{r['commit_cpu_us_normal_BB']:.0f} us with synchronous=NORMAL); a raw durable commit of one "
                  f"row here: {r['raw_commit_cpu_us']:.0f} us")
            print(f"  the same with send_many and recv_many of {CPU_BATCH}: AA {r['cpu_s_per_1000_AA_batched']:.3f} s, "
                  f"BB {r['cpu_s_per_1000_BB_batched']:.3f} s; passes / commits a message: "
                  f"AA {r['passes_per_msg_AA_batched']:.2f} / {r['commits_per_msg_AA_batched']:.2f}, "
                  f"BB {r['passes_per_msg_BB_batched']:.2f} / {r['commits_per_msg_BB_batched']:.2f}")
        if "idle" in parts:
            for w in ("fresh", "restarted"):
                print(f"  idle with two lines, {w}: {r[f'idle_core_share_{w}']:.2%} of a core, "
                      f"{r[f'idle_rss_mb_{w}']:.1f} MB resident (targets < {IDLE_CPU_TARGET:.0%}, "
                      f"< {IDLE_RSS_TARGET / 1e6:.0f} MB)")
        if "crypto" in parts and r["e2e"] != "off":
            opens = " and open" if r["e2e"] == "seal" else ""
            print(f"  the construction alone, a 128-byte message: {r['protect_us']:.1f} us to {r['e2e']} at its "
                  f"origin, {r['open_us']:.1f} us to check{opens} at its destination")
        if "urgent" in parts:
            print(f"  priority 7 behind 300 queued at 9600: waits {r['urgent_wait_ms_median']:.0f} ms (median), "
                  f"{r['urgent_wait_ms_max']:.0f} ms (max) beyond its own frame; one bulk frame "
                  f"{r['bulk_frame_ms']:.0f} ms (target: the median within one frame)")
    return 0 if met else 1
