"""`mccs bench route`: what multi-hop store and forward costs (issue 11).

Real daemon processes over `vserial` lines paced at 9600 baud, async protocol (only async lines
negotiate routing), networks built by `mccs loopback`'s Network and started only once every
host has a route to every other:

- goodput of 128-byte messages AA->DD over a chain AA-BB-CC-DD against AA->BB over one line,
  both networks up at once and measured alternately in each run, so the ratio comes from the
  same conditions. Goodput is message bytes a second at the destination between the first and
  the last arrival: the steady rate, which store and forward keeps only if the hops pipeline
  (a chain that stopped at each hop would give a third). The fill time of the chain is latency
  and is shown apart ("from SEND": from the first SEND to the last arrival);
- latency at light load: single paced messages, send time carried in the message; per hop is
  the chain's SEND-to-RECV time over 3, against one data frame's time on the line + 20 ms;
- reroute: an 8-host ring AA..HH with a steady stream AA->BB; the line AA-BB is cut (silent
  both ways, like a pulled cable) and the times from the cut until AA's line to BB is DOWN,
  until AA's route to BB takes the other way (next hop HH), and until the first message
  arrives at BB the other way round (a `received` trace event with more than one hop) are
  read from the daemons' traces, against 3 x the keep-alive interval of the lines' config.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

from mccs.testbed.hosts import DaemonProcess
from mccs.testbed.loopback import Network, Options, timers
from mccs.testbed.traffic import decode, encode

SIZE = 128
TARGET_OF_SINGLE = 0.95  # chain goodput against one line's
HOP_MARGIN = 0.020  # seconds a hop may add to one frame time
KEEPALIVES = 3  # reroute within this many keep-alive intervals


@contextlib.contextmanager
def network(root: Path, hosts: int, topology: str, baud: int) -> Iterator[Network]:
    """Async daemons on `topology`, yielded once every host has a route to every other."""
    net = Network(Options(hosts=hosts, topology=topology, protocol="async", baud=baud, quiet=True), root)
    with net.vlines:
        net.configs()
        try:
            for d in net.daemons.values():
                d.start()
            net.wait_for_routes()
            yield net
        finally:
            net.stop()


def goodput(src: DaemonProcess, dst: DaemonProcess, count: int, size: int) -> tuple[float, float]:
    """Message bytes a second at `dst`: between its first and last arrival (the steady rate),
    and from the first SEND to the last arrival (with the path's fill time)."""
    import mccs
    to = f"{dst.cfg.id}GR"
    with mccs.connect(dst.config, "GR") as r:
        t0 = time.time()
        sender = threading.Thread(target=_send_all, args=(src.config, to, count, b"g" * size))
        sender.start()
        arrivals = []
        for _ in range(count):
            if r.recv(timeout=120) is None:
                raise RuntimeError(f"a message for {to} did not arrive")
            arrivals.append(time.time())
        sender.join()
    steady = (count - 1) * size / (arrivals[-1] - arrivals[0])
    return steady, count * size / (arrivals[-1] - t0)


def _send_all(config: Path, to: str, count: int, data: bytes) -> None:
    import mccs
    with mccs.connect(config, "GS") as s:
        for _ in range(count):
            s.send(to, data)


def _paced(config: Path, name: str, to: str, interval: float, size: int, stop: threading.Event,
           count: int | None = None) -> None:
    """One message every `interval` seconds, its send time inside, until `count` or `stop`."""
    import mccs
    with mccs.connect(config, name) as s:
        t0, i = time.perf_counter(), 0
        while (count is None or i < count) and not stop.is_set():
            stop.wait(max(0.0, t0 + i * interval - time.perf_counter()))
            s.send(to, encode(i, time.time(), size))
            i += 1


def latency(src: DaemonProcess, dst: DaemonProcess, count: int, interval: float, size: int) -> float:
    """Median SEND-to-RECV seconds of single messages `interval` apart (no queue on any line)."""
    import mccs
    with mccs.connect(dst.config, "LAT") as r:
        sender = threading.Thread(target=_paced, args=(src.config, "PS", f"{dst.cfg.id}LAT", interval, size,
                                                       threading.Event(), count))
        sender.start()
        lat = []
        for _ in range(count):
            msg = r.recv(timeout=60)
            if msg is None:
                raise RuntimeError(f"a paced message for {dst.cfg.id} did not arrive")
            lat.append(time.time() - decode(msg.data)[1])
        sender.join()
    return statistics.median(lat)


def frame_bytes(size: int) -> int:
    """Wire bytes of one async data frame carrying a `size`-byte message in the routing envelope."""
    from linedrivers import image
    from linedrivers.async_frames import encode_frame
    from mccs.core import envelope
    img = image.encode("DDLAT", "AAPS", 1, 0, b"g" * size + bytes(envelope.SIZE))  # the envelope's room, unstuffed
    return len(encode_frame("D", 1, 0, img))


def trace_events(d: DaemonProcess, since: float) -> list[dict]:
    """The daemon's msg and line trace events at or after `since`, oldest first."""
    out = []
    for path in sorted(Path(d.cfg.trace_dir).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:  # a line being written
                continue
            if ev.get("type") in ("msg", "line") and ev.get("ts", 0) >= since:
                out.append(ev)
    return sorted(out, key=lambda ev: ev["ts"])


def _first(events: list[dict], **match) -> dict | None:
    return next((ev for ev in events if all(ev.get(k) == v for k, v in match.items())), None)


def reroute(ring: Network, run: int, interval: float, timeout: float = 180.0) -> dict:
    """Cut AA-BB under a steady stream AA->BB; seconds from the cut to AA's line DOWN, to its
    route to BB via HH, and to the first arrival at BB the other way round. Reconnects after."""
    import mccs
    aa, bb = ring.daemons["AA"], ring.daemons["BB"]
    stop, got = threading.Event(), []
    name = f"R{run}"  # a fresh receiver each run: what a run left on the way is not counted

    def drain() -> None:
        with mccs.connect(bb.config, name) as r:
            while not stop.is_set():
                if r.recv(timeout=0.2) is not None:
                    got.append(time.time())

    threads = [threading.Thread(target=drain),
               threading.Thread(target=_paced, args=(aa.config, "RS", f"BB{name}", interval, SIZE, stop))]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while len(got) < 3:  # the stream flows the short way first
            if time.monotonic() > deadline:
                raise RuntimeError("the stream AA->BB did not flow before the cut")
            time.sleep(0.05)
        cut = time.time()
        ring.vlines.lines["AA-BB"].disconnect()
        deadline = time.monotonic() + timeout
        while (arrival := next((ev for ev in trace_events(bb, cut)
                                if ev["kind"] == "received" and (ev.get("hops") or 0) > 1), None)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no message reached BB the other way round within {timeout:.0f} s of the cut")
            time.sleep(0.25)
    finally:
        stop.set()
        for t in threads:
            t.join()
    events = trace_events(aa, cut)
    down = _first(events, type="line", kind="down", line="BB")
    route = next((ev for ev in events if ev["kind"] == "route" and ev.get("to") == "BB"
                  and ev.get("line") not in (None, "BB")), None)
    ring.vlines.lines["AA-BB"].reconnect()
    _wait_direct(aa)
    return {"down_s": down["ts"] - cut if down else None, "route_s": route["ts"] - cut if route else None,
            "route_via": route["line"] if route else None, "arrival_s": arrival["ts"] - cut,
            "arrival_hops": arrival["hops"]}


def _wait_direct(aa: DaemonProcess, timeout: float = 60.0) -> None:
    """After the reconnect: AA routes to BB over their line again, ready for the next run."""
    import mccs
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with mccs.connect(aa.config, None) as c:
            if any(r["to"] == "BB" and r["via"] == "BB" for r in c.status()["routes"]):
                return
        time.sleep(0.2)
    raise RuntimeError("AA did not route to BB over their line again after the reconnect")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.description = (
        "Multi-hop store and forward between real daemons over vserial lines paced at the baud (async):\n"
        "  goodput  128-byte messages AA->DD over a chain AA-BB-CC-DD against AA->BB over one line,\n"
        "           alternately in each run; steady rate between the first and last arrival\n"
        "           (target: chain >= 95% of the single line, i.e. the hops pipeline)\n"
        "  latency  single paced messages AA->BB and AA->DD; per hop = chain / 3\n"
        "           (target: <= one data frame's time at the baud + 20 ms)\n"
        "  reroute  8-host ring AA..HH, stream AA->BB, cut the line AA-BB: seconds until AA's line\n"
        "           is DOWN, its route to BB goes via HH, and the first message reaches BB the other\n"
        "           way round (target: <= 3 x the keep-alive interval of the lines)\n"
        "Medians of --runs. Exit status 1 when a target is missed.")
    p.epilog = ("examples:\n  mccs bench route --runs 3\n"
                "  mccs bench route --runs 1 --messages 20 --reroute-runs 0 --json")
    p.add_argument("--runs", type=int, default=3, help="goodput and latency runs; medians are reported (default 3)")
    p.add_argument("--messages", type=int, default=100, help="messages per goodput measurement (default 100)")
    p.add_argument("--latency-messages", type=int, default=20, help="paced messages per latency measurement "
                                                                     "(default 20)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between paced messages (default 0.5)")
    p.add_argument("--reroute-runs", type=int, help="cuts of the ring's line AA-BB (default: --runs; 0: none)")
    p.add_argument("--baud", type=int, default=9600, help="speed of every line (default 9600, the targets' baud)")
    p.add_argument("--json", action="store_true", help="print the medians and every run as JSON")


def run(args: argparse.Namespace) -> int:
    from mccs.core import envelope
    baud, capacity = args.baud, args.baud / 10
    frame = frame_bytes(SIZE)
    frame_s = frame * 10 / baud
    keepalive = timers(baud)["keepalive"]  # what loopback's Network puts in every line's config
    paths = {"single": (2, "BB"), "chain": (4, "DD")}
    good: dict[str, list] = {p: [] for p in paths}
    e2e: dict[str, list] = {p: [] for p in paths}
    lat: dict[str, list] = {p: [] for p in paths}
    cuts = []
    with tempfile.TemporaryDirectory(prefix="mccs-bench-route-") as tmp:
        with network(Path(tmp) / "single", 2, "chain", baud) as one, \
                network(Path(tmp) / "chain", 4, "chain", baud) as four:
            nets = {"single": one, "chain": four}
            for i in range(args.runs):
                order = list(paths) if i % 2 == 0 else list(reversed(paths))  # neither always goes first
                for p in order:
                    g, e = goodput(nets[p].daemons["AA"], nets[p].daemons[paths[p][1]], args.messages, SIZE)
                    good[p].append(g)
                    e2e[p].append(e)
                for p in order:
                    lat[p].append(latency(nets[p].daemons["AA"], nets[p].daemons[paths[p][1]],
                                          args.latency_messages, args.interval, SIZE))
                print(f"run {i + 1}: single {good['single'][-1]:6.1f} B/s  chain {good['chain'][-1]:6.1f} B/s "
                      f"({good['chain'][-1] / good['single'][-1]:6.1%})  latency single "
                      f"{lat['single'][-1] * 1000:6.1f} ms  chain {lat['chain'][-1] * 1000:6.1f} ms", flush=True)
        reroute_runs = args.runs if args.reroute_runs is None else args.reroute_runs
        if reroute_runs:
            with network(Path(tmp) / "ring", 8, "ring", baud) as ring:
                for i in range(reroute_runs):
                    cuts.append(reroute(ring, i + 1, args.interval))
                    c = cuts[-1]
                    print(f"reroute run {i + 1}: line down {_s(c['down_s'])}  route via {c['route_via']} "
                          f"{_s(c['route_s'])}  first arrival the other way {_s(c['arrival_s'])} "
                          f"({c['arrival_hops']} hops)", flush=True)

    med = {p: {"goodput": statistics.median(good[p]), "from_send": statistics.median(e2e[p]),
               "latency": statistics.median(lat[p])} for p in paths}
    ratio = med["chain"]["goodput"] / med["single"]["goodput"]
    per_hop = med["chain"]["latency"] / 3
    hop_target = frame_s + HOP_MARGIN
    arrival = statistics.median(c["arrival_s"] for c in cuts) if cuts else None
    met = {"goodput": ratio >= TARGET_OF_SINGLE, "latency": per_hop <= hop_target,
           "reroute": None if arrival is None else arrival <= KEEPALIVES * keepalive}
    result = {"baud": baud, "size": SIZE, "envelope_bytes": envelope.SIZE, "frame_bytes": frame,
              "frame_ms": round(frame_s * 1000, 1), "keepalive_s": keepalive, "runs": args.runs,
              "medians": {p: {k: round(v * 1000, 1) if k == "latency" else round(v, 1) for k, v in m.items()}
                          for p, m in med.items()},
              "chain_of_single": round(ratio, 4), "per_hop_ms": round(per_hop * 1000, 1),
              "reroute": cuts, "reroute_arrival_s": None if arrival is None else round(arrival, 2), "met": met,
              "every_run": {"goodput": good, "from_send": e2e, "latency": lat}}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _table(result, med, capacity, hop_target, cuts)
    return 0 if all(v is not False for v in met.values()) else 1


def _s(seconds: float | None) -> str:
    return "    -  " if seconds is None else f"{seconds:6.2f} s"


def _table(r: dict, med: dict, capacity: float, hop_target: float, cuts: list[dict]) -> None:
    print(f"\nmccs bench route ({platform.node()}, {mp.cpu_count()} cores, Python {platform.python_version()}, "
          f"median of {r['runs']}; {SIZE}-byte messages, async, {r['baud']} baud, routing envelope "
          f"{r['envelope_bytes']} B, data frame {r['frame_bytes']} B = {r['frame_ms']} ms)")
    print(f"{'path':16} {'hops':>4} {'goodput B/s':>11} {'of single':>9} {'of line':>8} {'from SEND B/s':>13} "
          f"{'latency ms':>10} {'per hop ms':>10}")
    for p, label, hops in (("single", "AA-BB", 1), ("chain", "AA-BB-CC-DD", 3)):
        m = med[p]
        print(f"{label:16} {hops:4} {m['goodput']:11.1f} {m['goodput'] / med['single']['goodput']:9.1%} "
              f"{m['goodput'] / capacity:8.1%} {m['from_send']:13.1f} {m['latency'] * 1000:10.1f} "
              f"{m['latency'] * 1000 / hops:10.1f}")
    if cuts:
        print(f"\n8-host ring, line AA-BB cut under a stream AA->BB (keep-alive {r['keepalive_s']} s), seconds "
              f"after the cut:")
        print(f"{'run':>4} {'AA line DOWN':>12} {'route via':>9} {'route changed':>13} {'arrival other way':>17} "
              f"{'hops':>4}")
        for i, c in enumerate(cuts, 1):
            print(f"{i:4} {_s(c['down_s']):>12} {str(c['route_via']):>9} {_s(c['route_s']):>13} "
                  f"{_s(c['arrival_s']):>17} {c['arrival_hops']:4}")
    verdict = {True: "met", False: "NOT met", None: "not measured"}
    print("\ntargets:")
    print(f"  chain goodput >= {TARGET_OF_SINGLE:.0%} of the single line: {r['chain_of_single']:.1%}  "
          f"{verdict[r['met']['goodput']]}")
    print(f"  latency per hop <= frame time + 20 ms = {hop_target * 1000:.1f} ms: {r['per_hop_ms']:.1f} ms  "
          f"{verdict[r['met']['latency']]}")
    if r["reroute_arrival_s"] is not None:
        print(f"  reroute <= {KEEPALIVES} x keep-alive = {KEEPALIVES * r['keepalive_s']:.2f} s: "
              f"{r['reroute_arrival_s']:.2f} s  {verdict[r['met']['reroute']]}")
