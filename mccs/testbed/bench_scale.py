"""`mccs bench scale`: a network of daemon cores of any size in memory (mccs.testbed.hostsim), on
a virtual clock, with lines paced at their baud, cuts and kills: how long routing takes to learn
every host after the start and after each event, what routing costs each line, and whether a
sample of pairs sending all the time gets every message exactly once and in order (issue 38). A
message is delivered once, or still waiting for a route, or returned to its sender undeliverable
(a notice: it met the hop limit in a routing loop), or lost (none of those: a fault).

Every host has the defaults of a host's config but for its lines' baud. A cut takes a line out for
half the time between events; a kill is kill -9 with the host away for 60 s, then restarted
from its checkpoint. Routes have converged when, for every destination, the next hops of the hosts
that can reach it (over the lines up now, within the hop limit) lead to it without a loop.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import gc
import json
import random
import resource
import string
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

from mccs.config import LineConfig
from mccs.testbed.hostsim import SimClient, SimHost, SimNet

SHAPES = ("ring", "tree", "grid", "mesh")
KILLED_FOR = 60.0  # seconds a killed host stays away (longer than its neighbours take to see it gone)
SETTLE = 120.0  # seconds of no events at the end, for what is on its way to arrive
# Issue 38's targets: each event converged within this, routing at most this share of any line, and
# a thousand hosts for a simulated hour within this wall time.
CONVERGE_WITHIN, ROUTING_SHARE, WALL_FOR_1000_HOURS = 60.0, 0.01, 600.0
ID_CHARS = string.ascii_uppercase + string.digits  # 36 x 36 host ids


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", type=int, default=50, help="hosts in the network (default: %(default)s)")
    p.add_argument("--shape", choices=SHAPES, default="mesh",
                   help="ring; binary tree; square grid; mesh: random, average degree 3 (default: %(default)s)")
    p.add_argument("--baud", type=int, default=9600, help="every line's speed (default: %(default)s)")
    p.add_argument("--duration", type=float, default=600.0,
                   help="simulated seconds of traffic (default: %(default)s)")
    p.add_argument("--cuts", type=int, default=2, help="lines cut (and healed) during the run (default: %(default)s)")
    p.add_argument("--kills", type=int, default=1,
                   help="hosts killed (kill -9; back 60 s later) (default: %(default)s)")
    p.add_argument("--pairs", type=int, default=50, help="pairs of hosts sending all the time (default: %(default)s)")
    p.add_argument("--rate", type=float, default=3.0,
                   help="messages a second, all pairs together (default: %(default)s: 10,800 an hour)")
    p.add_argument("--seed", type=int, default=1,
                   help="of the topology, the traffic, the events and every host's random choices: "
                   "a run with the same arguments repeats itself (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="the figures as JSON")
    p.add_argument("--plot", metavar="PNG", help="no run: draw convergence and routing share against the number "
                   "of hosts, a line a shape, from the results in --from (matplotlib)")
    p.add_argument("--from", dest="results", metavar="JSON", help="for --plot: a JSON list of --json results")


def host_ids(n: int) -> list[str]:
    if not 2 <= n <= len(ID_CHARS) ** 2:
        raise ValueError(f"--hosts must be 2 to {len(ID_CHARS) ** 2}")
    return [a + b for a in ID_CHARS for b in ID_CHARS][:n]


def topology(shape: str, hosts: list[str], rng: random.Random) -> list[tuple[str, str]]:
    """The lines of a network of this shape, as pairs of host ids."""
    n = len(hosts)
    if shape == "ring":
        idx = [(i, (i + 1) % n) for i in range(n if n > 2 else 1)]
    elif shape == "tree":
        idx = [((i - 1) // 2, i) for i in range(1, n)]
    elif shape == "grid":
        w = max(1, round(n ** 0.5))
        idx = [(i, i + 1) for i in range(n - 1) if (i + 1) % w] + [(i, i + w) for i in range(n - w)]
    else:  # a random spanning tree, then random lines until the average degree is 3
        have = {(rng.randrange(i), i) for i in range(1, n)}
        while len(have) < min(3 * n // 2, n * (n - 1) // 2):
            a, b = sorted(rng.sample(range(n), 2))
            have.add((a, b))
        idx = sorted(have)
    return [(hosts[a], hosts[b]) for a, b in idx]


@dataclass(frozen=True)
class Event:
    at: float
    what: str  # cut, heal, kill, revive
    line: tuple[str, str] = ("", "")  # a cut's and a heal's
    host: str = ""  # a kill's and a revive's

    def __str__(self) -> str:
        return f"{self.what} {self.host or '-'.join(self.line)}"


@dataclass
class Flow:
    """One pair's messages: sequence numbers sent (accepted) and received, in order of arrival."""
    src: str
    dst: str
    sent: int = 0
    accepted: set[int] = field(default_factory=set)
    got: list[int] = field(default_factory=list)  # as handed to the receiver, again after a restart too
    confirmed: set[int] = field(default_factory=set)  # their confirms committed: never to be handed again
    duplicated: int = 0
    refused: int = 0  # SENDs refused (a host not known here: no route learned to it)


class Scale:
    """The network, its traffic and its events, stepped on the simulator's clock."""

    def __init__(self, args: argparse.Namespace, directory: str):
        self.rng = random.Random(args.seed)
        self.ids = host_ids(args.hosts)
        self.edges = topology(args.shape, self.ids, self.rng)
        lines: dict[str, list[LineConfig]] = {h: [] for h in self.ids}
        for a, b in self.edges:
            lines[a].append(LineConfig(peer=b, port=f"sim://{b}", baud=args.baud))
            lines[b].append(LineConfig(peer=a, port=f"sim://{a}", baud=args.baud))
        self.net = SimNet(directory, lines, seed=args.seed, record=False)
        self.hop_limit = self.net[self.ids[0]].cfg.hop_limit  # (every host has the default)
        for ch in self.net.channels.values():
            ch.ab.imp.baud = ch.ba.imp.baud = args.baud
        self.cut: set[tuple[str, str]] = set()
        self.away: dict[str, SimHost] = {}  # killed hosts, until they come back
        pairs = min(args.pairs, len(self.ids) * (len(self.ids) - 1))
        chosen: set[tuple[str, str]] = set()
        while len(chosen) < pairs:
            src, dst = self.rng.sample(self.ids, 2)
            chosen.add((src, dst))
        self.flows = [Flow(a, b) for a, b in sorted(chosen)]
        self.destinations = {f.dst for f in self.flows}
        self._unheard = set(self.destinations)  # destinations with no receiver yet (or again, after a kill)
        self.senders: dict[str, SimClient] = {}
        self.receivers: dict[str, tuple[SimClient, int, list]] = {}  # host -> client, its RECV, what that confirms
        self.pending: dict[str, dict[int, tuple[Flow, int]]] = {}  # host -> rid -> the SEND's flow and seq
        self.routing_bytes: Counter = Counter()  # per line, what killed hosts' lines had counted
        self._failing: str | None = None  # the destination the last look at convergence failed on
        self._changed()

    def _changed(self, spoiled: set[str] | None = None) -> None:
        """The lines or hosts changed (an event): the destinations it `spoiled` are looked at again
        (None: every one)."""
        self._nbrs = self._up()  # host -> its neighbours over the lines up
        if spoiled is None:
            self._good: set[str] = set()  # destinations found good since, no route to them moved after
            self._looked: float | None = None  # when the last look was
        else:
            self._good -= spoiled
        self._last: bool | None = None  # what the last look found (None: one must come)

    def _spoiled(self, ev: Event) -> set[str] | None:
        """The destinations found good that `ev` may make bad (None: any). A cut: those a host at
        either end routes over the line. A kill: the host and those its neighbours route through
        it. A heal of a line between hosts joined already, in a part no wider than the hop limit:
        none (what a host must reach is as it was). A revive: any (the host knows nothing yet)."""
        hop = {h: self.net[h].kernel.routes.next_hop for h in self._nbrs}
        a, b = ev.line
        if ev.what in ("cut", "heal") and not (a in self._nbrs and b in self._nbrs):
            return set()  # (a host at an end is away: the lines up are as they were)
        if ev.what == "cut":
            return {d for d in self._good if hop[a](d) == b or hop[b](d) == a}
        if ev.what == "kill":
            return {ev.host} | {d for d in self._good for h in self._nbrs.get(ev.host, ()) if hop[h](d) == ev.host}
        if ev.what == "heal":
            part, far = _rings(self._nbrs, a, len(self._nbrs))
            return set() if b in part and 2 * far <= self.hop_limit else None
        return None

    # -- what the test of convergence sees ----------------------------------------------------
    def _up(self) -> dict[str, set[str]]:
        nbrs: dict[str, set[str]] = {h: set() for h in self.ids if h not in self.away}
        for a, b in self.edges:
            if (a, b) not in self.cut and a in nbrs and b in nbrs:
                nbrs[a].add(b)
                nbrs[b].add(a)
        return nbrs

    def converged(self) -> bool:
        """Every host that can reach a destination (over the lines up, within the hop limit) has a
        next hop to it that leads there. A look costs what moved since the last: a destination
        found good stays good until an event or until a host's route to it moves, and the one
        that failed the last look is looked at first, so a look while routes still move ends at once.
        An event spoils only what it may (_spoiled)."""
        tables = {h: self.net[h].kernel.routes for h in self._nbrs}
        if self._looked is not None:
            moved = {d for t in tables.values() for d in t.moved_since(self._looked)}
            if not moved and self._last is not None:
                return self._last
            self._good -= moved
        self._looked = self.net.now
        self._last = self._look(tables)
        return self._last

    def _look(self, tables: dict) -> bool:
        nbrs = self._nbrs
        parts: dict[str, tuple[set[str], bool]] = {}  # host -> its part of the network, wider than the limit?
        hop = {h: t.next_hop for h, t in tables.items()}
        for dest in sorted(nbrs.keys() - self._good, key=lambda d: d != self._failing):
            ok = {dest}
            for h in _reach(nbrs, dest, self.hop_limit, parts):
                path: list[str] = []
                at = h
                while at not in ok:
                    path.append(at)
                    nxt = hop[at](dest)
                    if nxt is None or nxt not in nbrs[at] or nxt in path:
                        self._failing = dest
                        return False
                    at = nxt
                ok.update(path)
            self._good.add(dest)
        return True

    # -- traffic ----------------------------------------------------------------------------------
    def send_one(self) -> None:
        index = self.rng.randrange(len(self.flows))
        flow = self.flows[index]
        if flow.src in self.away:
            return
        flow.sent += 1
        if flow.src not in self.senders:
            self.senders[flow.src] = self.net.client(flow.src, "S")
        c = self.senders[flow.src]
        body = f"{index} {flow.sent}".encode()
        rid = c.request({"op": "send", "to": flow.dst + "R", "data": base64.b64encode(body).decode()})
        self.pending.setdefault(flow.src, {})[rid] = (flow, flow.sent)

    def collect(self) -> None:
        """Replies to the SENDs (accepted or not) and the messages the receivers were handed, at the
        hosts that handed their processes something since the last look (SimNet.replied)."""
        replied, self.net.replied = self.net.replied, set()
        for host in sorted(replied & self.pending.keys()):
            c, waiting = self.senders[host], self.pending[host]
            for rid, (flow, seq) in list(waiting.items()):
                reply = c.reply(rid)
                if reply is not None:
                    del waiting[rid]
                    if reply.get("ok"):
                        flow.accepted.add(seq)
                    else:
                        flow.refused += 1
        for host in sorted((replied & self.destinations) | self._unheard):
            if host in self.away:
                continue
            if host in self._unheard:
                self._unheard.discard(host)
                c = self.net.client(host, "R")
                self.receivers[host] = (c, c.request({"op": "recv", "wait": True}), [])
            c, rid, confirming = self.receivers[host]
            reply = c.reply(rid)
            if reply is None:
                continue
            for flow, seq in confirming:  # the RECV's reply comes after its confirms' commit
                flow.confirmed.add(seq)
            msg, confirm, confirming = reply.get("msg"), [], []
            if msg:
                index, seq = map(int, base64.b64decode(msg["data"]).split())
                flow = self.flows[index]
                flow.duplicated += seq in flow.confirmed  # (one handed again, unconfirmed, after a restart is not)
                flow.got.append(seq)
                confirm, confirming = [msg["rid"]], [(flow, seq)]
            self.receivers[host] = (c, c.request({"op": "recv", "wait": True, "confirm": confirm}), confirming)

    # -- events -----------------------------------------------------------------------------------
    def apply(self, ev: Event) -> None:
        spoiled = self._spoiled(ev)
        if ev.what == "cut":
            self.cut.add(ev.line)
            self.net.channel(*ev.line).disconnect()
        elif ev.what == "heal":
            self.cut.discard(ev.line)
            self.net.channel(*ev.line).reconnect()
        elif ev.what == "kill":
            self.kill(ev.host)
        else:
            self.revive(ev.host)
        self._changed(spoiled)

    def kill(self, host: str) -> None:
        self.routing_bytes.update(self.routing_bytes_of(host))
        self.away[host] = self.net.hosts.pop(host)
        self.senders.pop(host, None)
        if self.receivers.pop(host, None) is not None:
            self._unheard.add(host)
        self.pending.pop(host, None)

    def routing_bytes_of(self, host: str) -> Counter:
        """The routing updates' bytes this host's lines have sent since it started."""
        core = (self.net.hosts.get(host) or self.away[host]).kernel
        return Counter({tuple(sorted((host, peer))): lcb.counters.get("routing_bytes", 0)
                        for peer, lcb in core.lines.lcbs.items()})

    def revive(self, host: str) -> None:
        self.net.hosts[host] = self.away.pop(host)
        self.net[host].crash()  # memory gone; the checkpoint as of its last commit


def run(args: argparse.Namespace) -> int:
    try:
        if args.plot:
            plot(args.results, args.plot)
            return 0
        out = measure(args)
    except (ValueError, OSError) as e:
        print(f"mccs bench scale: {e}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1) if args.json else table(out))
    return 0


def targets(out: dict) -> dict[str, bool | None]:
    """Each of issue 38's targets, met or not (None: this run is not the size it is set for)."""
    m = out["messages"]
    big = out["hosts"] >= 1000 and out["duration"] >= 3600
    return {"converged": all(c["seconds"] is not None and c["seconds"] <= CONVERGE_WITHIN for c in out["converged"]),
            "routing": out["routing_bytes"]["max_share"] <= ROUTING_SHARE,
            "exactly_once": (m["delivered"], m["lost"], m["duplicated"], m["reordered"]) == (m["accepted"], 0, 0, 0),
            "wall": out["wall_seconds"] <= WALL_FOR_1000_HOURS if big else None}


def plot(results: str | None, png: str) -> None:
    """Convergence (the slowest event) and the routing share of the busiest line, against hosts."""
    if not results:
        raise ValueError("--plot needs --from, a JSON list of --json results")
    with open(results) as f:
        runs = json.load(f)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (conv, share) = plt.subplots(1, 2, figsize=(10, 4))
    for shape in SHAPES:
        mine = sorted((r for r in runs if r["shape"] == shape), key=lambda r: r["hosts"])
        if not mine:
            continue
        slowest = [max((c["seconds"] for c in r["converged"]), key=lambda x: float("inf") if x is None else x)
                   for r in mine]
        conv.plot([r["hosts"] for r in mine], [float("nan") if x is None else x for x in slowest], "o-", label=shape)
        share.plot([r["hosts"] for r in mine], [100 * r["routing_bytes"]["max_share"] for r in mine], "o-",
                   label=shape)
    conv.axhline(CONVERGE_WITHIN, color="grey", ls="--")
    share.axhline(100 * ROUTING_SHARE, color="grey", ls="--")
    conv.set(xscale="log", xlabel="hosts", ylabel="slowest event to converge (simulated s)")
    share.set(xscale="log", xlabel="hosts", ylabel="routing, busiest line (% of its capacity)")
    conv.legend()
    fig.suptitle("mccs bench scale: 9600 baud, cuts and kills (a gap: never converged)")
    fig.tight_layout()
    fig.savefig(png, dpi=80)


def measure(args: argparse.Namespace) -> dict:
    if args.shape not in SHAPES:
        raise ValueError(f"--shape must be one of {', '.join(SHAPES)}")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        with _collector_off() as garbage:
            s = Scale(args, d)
            converge = _run(args, s)
            wall = time.monotonic() - t0
        out = _figures(args, s, converge, wall, garbage[0])
    return {**out, "targets": targets(out)}


def _run(args: argparse.Namespace, s: Scale) -> list[dict]:
    """The simulated time: events, looks at convergence once a simulated second, traffic; when
    each event converged."""
    net = s.net
    events = _events(args, s)
    converge: list[dict] = [{"event": "start", "at": 0.0, "seconds": None}]
    next_send, next_check = 0.0, 0.0
    end = args.duration + SETTLE
    while net.now < end:
        if events and events[0].at <= net.now:
            ev = events.pop(0)
            s.apply(ev)
            converge.append({"event": str(ev), "at": round(net.now, 1), "seconds": None})
        if net.now >= next_check:
            next_check = net.now + 1.0
            last = converge[-1]
            if last["seconds"] is None and s.converged():
                last["seconds"] = round(net.now - last["at"], 1)
        while net.now >= next_send and next_send < args.duration:
            s.send_one()
            next_send += s.rng.expovariate(args.rate)
        s.collect()
        net.step(limit=min(next_send if next_send < args.duration else end, next_check, end,
                           events[0].at if events else end))
    return converge


@contextlib.contextmanager
def _collector_off():
    """CPython's cyclic garbage collector off while the network runs; what it would have found
    (objects in reference cycles, unreachable) counted at the end, into the list yielded. A
    thousand hosts are a GB of small objects that live long (routes, blocks, timers), and the
    collector walked them again and again (with it off, the first 15 simulated seconds of 1,000
    hosts take 0.84 of the time).
    The hosts' objects make no cycles that outlive them (reference counting frees them); the
    count, in every run's figures, says so."""
    found = [0]
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield found
        found[0] = gc.collect()
    finally:
        if was:
            gc.enable()


def _reach(nbrs: dict[str, set[str]], dest: str, limit: int, parts: dict[str, tuple[set[str], bool]]) -> set[str]:
    """The hosts within `limit` lines of `dest`: its whole part of the network when that part is no
    wider than the limit (twice the farthest any host is from one of it bounds its width), which is
    one search a part (`parts`, shared by the destinations of one look), not one a destination."""
    if dest not in parts:
        part, far = _rings(nbrs, dest, len(nbrs))
        parts.update(dict.fromkeys(part, (part, 2 * far > limit)))
    part, wide = parts[dest]
    return _rings(nbrs, dest, limit)[0] if wide else part


def _rings(nbrs: dict[str, set[str]], start: str, most: int) -> tuple[set[str], int]:
    """The hosts at most `most` lines from `start`, and how far the farthest of them is."""
    reach, ring, far = {start}, {start}, 0
    while ring and far < most:
        ring = {n for at in ring for n in nbrs[at] if n not in reach}
        if ring:
            reach |= ring
            far += 1
    return reach, far


def _events(args: argparse.Namespace, s: Scale) -> list[Event]:
    """Cuts and kills spread evenly over the run, taking turns; a cut heals half the gap later (a
    line takes 25 to 37 s to find it is cut: the routes' convergence is measured after that)."""
    kinds = ["cut"] * args.cuts + ["kill"] * args.kills
    s.rng.shuffle(kinds)
    gap = args.duration / (len(kinds) + 1)
    out: list[Event] = []
    for i, kind in enumerate(kinds, 1):
        at = i * gap
        if kind == "cut":
            edge = s.rng.choice(s.edges)
            out += [Event(at, "cut", line=edge), Event(at + gap / 2, "heal", line=edge)]
        else:
            host = s.rng.choice(s.ids)
            out += [Event(at, "kill", host=host), Event(at + min(KILLED_FOR, gap / 2), "revive", host=host)]
    return sorted(out, key=lambda e: e.at)


def _figures(args: argparse.Namespace, s: Scale, converge: list[dict], wall: float, garbage: int) -> dict:
    capacity = args.baud / 10 * s.net.now  # bytes a line can carry one way over the run
    per_line = Counter(s.routing_bytes)
    for h in s.ids:
        per_line.update(s.routing_bytes_of(h))
    accepted = sum(len(f.accepted) for f in s.flows)
    delivered = sum(len(set(f.got) & f.accepted) for f in s.flows)
    duplicated = sum(f.duplicated for f in s.flows)
    reordered = sum(sum(1 for a, b in zip(f.got, f.got[1:]) if b < a and b not in f.got[:f.got.index(a)])
                    for f in s.flows)  # (not counting one handed again after a restart)
    lines = max(1, len(s.edges))
    hosts = [s.net.hosts.get(h) or s.away[h] for h in s.ids]
    cores = [h.kernel for h in hosts]
    passes = sum(h.pass_count for h in hosts)
    held = sum(blk.to_id[2:] == "R   " for core in cores for blk in core.lists.send)  # waiting for a route still
    returned = sum(len(box.ready) for core in cores for pid, box in core.lists.recv.boxes.items()
                   if pid[2:] == "S   ")  # notices to the senders: returned undeliverable (the hop limit)
    worst = max(per_line.values(), default=0)
    return {"hosts": args.hosts, "shape": args.shape, "lines": len(s.edges), "baud": args.baud,
            "duration": args.duration, "simulated": round(s.net.now, 1), "seed": args.seed,
            "converged": converge,
            "routing_bytes": {"max": worst, "mean": round(sum(per_line.values()) / lines, 1),
                              "max_share": round(worst / (2 * capacity), 6) if capacity else 0.0},
            "messages": {"refused": sum(f.refused for f in s.flows), "accepted": accepted, "delivered": delivered,
                         "waiting": held, "returned": returned, "lost": accepted - delivered - held - returned,
                         "duplicated": duplicated, "reordered": reordered},
            "passes": {"total": passes,
                       "per_host_second": round(passes / (args.hosts * s.net.now), 3) if s.net.now else 0.0,
                       "busiest_second": max((h.busiest for h in hosts), default=0)},
            "wall_seconds": round(wall, 1),
            "garbage_objects": garbage,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "rss_per_host_kb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / args.hosts, 1)}


def table(out: dict) -> str:
    m, r, p = out["messages"], out["routing_bytes"], out["passes"]
    conv = "  ".join(f"{c['event']} at {c['at']:g} s: " + ("never" if c["seconds"] is None else f"{c['seconds']:g} s")
                     for c in out["converged"])
    return "\n".join([
        f"mccs bench scale: {out['hosts']} hosts, {out['shape']} of {out['lines']} lines at {out['baud']} baud, "
        f"{out['duration']:g} s of traffic (+{SETTLE:g} s settling), seed {out['seed']}",
        f"  routes converged    {conv}",
        f"  routing bytes/line  max {r['max']:,}  mean {r['mean']:,}  (max {100 * r['max_share']:.3f}% of the line)",
        f"  messages            refused {m['refused']:,}  accepted {m['accepted']:,}  "
        f"delivered once {m['delivered']:,}  "
        f"waiting for a route {m['waiting']:,}  returned undeliverable {m['returned']}  lost {m['lost']}  "
        f"duplicated {m['duplicated']}  reordered {m['reordered']}",
        f"  passes              {p['total']:,} ({p['per_host_second']:g} a host a simulated second; "
        f"the most one host ran in a second: {p['busiest_second']:,})",
        f"  wall time           {out['wall_seconds']:g} s   peak memory {out['peak_rss_mb']:g} MB "
        f"({out['rss_per_host_kb']:g} kB a host)   in reference cycles at the end {out['garbage_objects']:,} objects",
        "  targets (issue 38)  " + "  ".join(f"{name.replace('_', ' ')}: " + ("-" if ok is None else "met" if ok
                                                                                else "NOT met")
                                             for name, ok in targets(out).items())])
