"""`mccs loopback`: a whole MCCS network on one machine, and a verdict on it.

N daemons run as separate processes, joined by `vserial` lines (a full mesh, the links given,
or a topology: chain, ring, star, mesh), each line async or BSC at a chosen baud and bit-error
rate. Sender and receiver processes on every host exchange M messages between random process
pairs on directly linked hosts, or, with a topology (or `--routed`), on any hosts that routing
joins (async lines route; a BSC line joins only its two ends), while lines are disconnected and
daemons killed with SIGKILL on a schedule. The verdict
comes from the processes' own logs: every message whose MSG_ID was returned must arrive exactly
once, and in order for each pair of processes.

With a per-message `ttl` or `receipts`, the senders also RECV the notices their daemons send
back, and a message may be returned: then each message sent must either arrive exactly once or
come back exactly once as an undeliverable notice (never both, never neither), each one
delivered with a receipt must get exactly one delivered notice, every host's WAIT, SEND and
RECV lists must be empty at the end, and no line's `too_large` counter may be above zero.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import itertools
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

from linedrivers.ids import host_of
from mccs.daemon.service import stop_on_sigterm
from mccs.testbed.hosts import DaemonProcess, give_keys, start_all, stop_all, write_config
from mccs.testbed.vserial import Lines


@dataclasses.dataclass
class Options:
    hosts: int = 3
    links: list[str] | None = None  # "AA-BB" specs; None: full mesh
    topology: str | None = None  # chain, ring, star or mesh: traffic between any hosts, routed
    routed: bool = False  # with `links`: traffic between any hosts routing joins (a topology implies it)
    protocol: str = "mixed"  # async, bsc, or mixed (the first link BSC, the others async)
    baud: int = 115200
    ber: float = 0.0
    messages: int = 300
    senders: int = 2  # sender processes per host
    receivers: int = 2  # receiver processes per host
    size: int = 64  # bytes of MESSAGE
    disconnect_every: float = 0.0  # seconds between line disconnects (0: none)
    disconnect_for: float = 1.0
    kill_every: float = 0.0  # seconds between kill -9 of a daemon (0: none)
    timeout: float = 240.0  # for the whole run
    seed: int = 1
    dir: str | None = None  # keep everything here (configs, checkpoints, traces, logs)
    kills: int = 0  # this many kills, the run going on until they are done (0: as long as the traffic lasts)
    disconnects: int = 0  # this many disconnects, likewise
    ttl: float | None = None  # seconds each message may wait on the way (None: the host's ttl)
    receipts: bool = False  # each message asks for a delivered notice
    e2e: str = "off"  # sign or seal: every host protects end to end, each trusting all (docs/E2E.md)
    fault_drop_received: int = 0  # test of the verdict: receivers forget every Nth message they got
    quiet: bool = False

    @property
    def notices(self) -> bool:
        """Do the senders RECV notices, and may a message come back undeliverable?"""
        return self.ttl is not None or self.receipts


TOPOLOGIES = ("chain", "ring", "star", "mesh")


def host_ids(n: int) -> list[str]:
    if not 2 <= n <= 26:
        raise ValueError("--hosts must be from 2 to 26")
    return [chr(ord("A") + i) * 2 for i in range(n)]


def topology_links(kind: str, hosts: list[str]) -> list[str]:
    pairs = {"chain": zip(hosts, hosts[1:]),
             "ring": zip(hosts, hosts[1:] + hosts[:1]) if len(hosts) > 2 else zip(hosts, hosts[1:]),
             "star": ((hosts[0], h) for h in hosts[1:]),
             "mesh": itertools.combinations(hosts, 2)}[kind]
    return [f"{a}-{b}" for a, b in pairs]


def timers(baud: int) -> dict:
    """Timers short enough for a quick run, long enough for a block and its reply at this baud."""
    block = 300 * 10 / baud
    reply = round(0.4 + 3 * block, 3)
    return {"reply_timeout": reply, "disconnect_timeout": round(10 * reply, 3), "keepalive": round(5 * reply, 3),
            "ttd_timeout": round(0.6 * reply, 3), "backoff_max": 2.0}


class Network:
    """Lines, daemons and traffic processes of one run, all under `root`."""

    def __init__(self, opts: Options, root: Path):
        self.opts, self.root = opts, root
        self.hosts = host_ids(opts.hosts)
        self.links = opts.links or topology_links(opts.topology or "mesh", self.hosts)
        unknown = {h for spec in self.links for h in spec.split("-")} - set(self.hosts)
        if unknown:
            raise ValueError(f"links name hosts that are not in the network: {', '.join(sorted(unknown))}")
        self.protocol = {spec: self._protocol(i) for i, spec in enumerate(self.links)}
        self.neighbours = collections.defaultdict(list)
        for spec in self.links:
            a, b = spec.split("-")
            self.neighbours[a].append(b)
            self.neighbours[b].append(a)
        self.routed = bool(opts.topology or opts.routed)
        self.targets = {h: self._reachable(h) if self.routed else self.neighbours[h] for h in self.hosts}
        self.vlines = Lines(str(root / "dev"), self.links, baud=opts.baud, ber=opts.ber, seed=opts.seed)
        self.daemons: dict[str, DaemonProcess] = {}
        self.procs: list[subprocess.Popen] = []
        self.lists_asked = float("-inf")  # when settled() last asked the daemons for their lists
        self.empty_since: float | None = None  # since when settled() found them all empty

    def _protocol(self, i: int) -> str:
        if self.opts.protocol == "mixed":
            return "bsc" if i == 0 else "async"
        return self.opts.protocol

    def _reachable(self, host: str) -> list[str]:
        """The hosts routing joins to `host`: over async lines, and its own BSC neighbours."""
        seen, todo = {host}, [host]
        while todo:
            h = todo.pop()
            for peer in self.neighbours[h]:
                spec = f"{h}-{peer}" if f"{h}-{peer}" in self.protocol else f"{peer}-{h}"
                if peer not in seen and self.protocol[spec] == "async":
                    seen.add(peer)
                    todo.append(peer)
        return sorted((seen | set(self.neighbours[host])) - {host})

    def wait_for_routes(self, timeout: float = 60.0) -> None:
        """Before traffic: every host knows a route to every host it will send to."""
        import mccs
        deadline = time.monotonic() + timeout
        for host, d in self.daemons.items():
            while True:
                with mccs.connect(d.config, None, connect_timeout=5) as c:
                    routes = {r["to"] for r in c.status()["routes"] if r["distance"] is not None}
                if set(self.targets[host]) <= routes:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{host} learned no route to {sorted(set(self.targets[host]) - routes)} "
                                       f"in {timeout:.0f} s")
                time.sleep(0.2)

    def settled(self, sent: dict, got: dict, f: Fates | None, now: float) -> bool:
        """Is every message sent where it ends? Delivered; with notices (`f`), delivered or
        returned, with its receipt if asked; and no message left on any host's SEND or RECV list,
        the daemons' own (custody's states) included, so that the traces end with every message
        received (asked at most every 0.5 s, once the rest holds; WAIT_LIST holds the traffic
        processes' RECVs until they stop)."""
        done = all(got.get(k) for k in sent) if f is None else f.settled(sent, got, self.opts.receipts)
        if not done or now < self.lists_asked + 0.5:
            return False
        self.lists_asked = now
        statuses = [_status(d) for d in self.daemons.values()]
        lists = [s.get("lists", {"send": "?"}) for s in statuses]
        owed = [s.get("custody", {}).get("owed") for s in statuses]  # (custody's states for the last taken)
        if any(x.get("send") or x.get("recv") for x in lists) or any(owed):
            self.empty_since = None
            return False
        if self.empty_since is None:
            self.empty_since = now
        return now >= self.empty_since + 1.0

    def configs(self) -> None:
        for host in self.hosts:
            lines = []
            for spec in self.links:
                a, b = spec.split("-")
                if host not in (a, b):
                    continue
                peer = b if host == a else a
                lines.append({"peer": peer, "port": self.vlines.port(host, peer), "protocol": self.protocol[spec],
                              "baud": self.opts.baud, "role": "primary" if host < peer else "secondary",
                              **timers(self.opts.baud)})
            self.daemons[host] = DaemonProcess(write_config(self.root, host, lines, e2e=self.opts.e2e))
        if self.opts.e2e != "off":
            give_keys([d.config for d in self.daemons.values()])

    def plan_traffic(self) -> dict[str, list[str]]:
        """Each message: a sender process, a receiver process on a host it can reach."""
        rng = random.Random(self.opts.seed)
        senders = [f"{h}S{i}" for h in self.hosts if self.targets[h] for i in range(self.opts.senders)]
        plans: dict[str, list[str]] = {s: [] for s in senders}
        for k in range(self.opts.messages):
            sender = senders[k % len(senders)]
            peer = rng.choice(self.targets[host_of(sender)])
            plans[sender].append(f"{peer}R{rng.randrange(self.opts.receivers)}")
        return plans

    def start_traffic(self, plans: dict[str, list[str]]) -> None:
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        py = [sys.executable, "-m", "mccs.testbed.traffic"]
        for host in self.hosts:
            for i in range(self.opts.receivers):
                name = f"R{i}"
                self.procs.append(subprocess.Popen(py + ["recv", str(self.daemons[host].config), name,
                                                         str(logs / f"{host}{name}.recv"), str(self.root / "stop"),
                                                         str(self.opts.fault_drop_received)]))
        notices = []
        if self.opts.ttl is not None:
            notices += ["--ttl", str(self.opts.ttl)]
        if self.opts.receipts:
            notices.append("--receipt")
        for sender, targets in plans.items():
            plan = logs / f"{sender}.plan"
            plan.write_text("\n".join(targets) + "\n")
            listen = ["--notices", str(logs / f"{sender}.notices"), str(self.root / "stop")] if notices else []
            self.procs.append(subprocess.Popen(py + ["send", str(self.daemons[host_of(sender)].config), sender[2:],
                                                     str(logs / f"{sender}.sent"), str(plan), str(self.opts.size)]
                                               + notices + listen))

    def stop_traffic(self) -> None:
        (self.root / "stop").touch()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()

    def stop(self) -> None:
        self.stop_traffic()
        stop_all(self.daemons.values())
        self.vlines.close()


def read_logs(root: Path) -> tuple[dict, dict]:
    """sent[(sender, seq)] = (msg_id, send_time, to_id); got[(sender, seq)] = [(receiver, latency)],
    receivers' entries in the order each receiver got them."""
    sent, got = {}, collections.defaultdict(list)
    for path in sorted((root / "logs").glob("*.sent")):
        for line in path.read_text().splitlines():
            msg_id, seq, t, to_id = line.split()
            sent[(path.stem, int(seq))] = (int(msg_id), float(t), to_id)
    for path in sorted((root / "logs").glob("*.recv")):
        for line in path.read_text().splitlines():
            sender, seq, t_sent, t_recv = line.split()[:4]
            got[(sender, int(seq))].append((path.stem, float(t_recv) - float(t_sent)))
    return sent, got


def protection(root: Path) -> dict[str, int]:
    """How the messages the receivers got came end to end: {"sealed": n, ...} (docs/E2E.md)."""
    modes: collections.Counter[str] = collections.Counter()
    for path in sorted((root / "logs").glob("*.recv")):
        modes.update((line.split()[5:] or ["none"])[0] for line in path.read_text().splitlines())
    return dict(modes)


def read_notices(root: Path) -> dict[tuple[str, int], list[dict]]:
    """notices[(sender, msg_id)]: the notices the sender got about its message of that MSG_ID (a
    host reuses a MSG_ID only after 8,192 others, more than a run sends). Whole lines only: a
    sender may be writing one."""
    out = collections.defaultdict(list)
    for path in sorted((root / "logs").glob("*.notices")):
        for line in path.read_text().split("\n")[:-1]:
            notice = json.loads(line)
            out[(path.stem, notice.get("msg_id"))].append(notice)
    return out


@dataclasses.dataclass
class Fates:
    """What the notices say of the messages sent, keyed (sender, seq) as in read_logs."""
    returned: collections.Counter  # undeliverable notices of each message
    receipts: collections.Counter  # delivered notices of each message
    reasons: collections.Counter  # undeliverable notices by their reason code
    unknown: int  # notices about no message of theirs, not from a daemon, or not as a notice is made

    def settled(self, sent: dict, got: dict, receipts: bool) -> bool:
        """Every message delivered or returned, and each one delivered has its receipt if asked."""
        return all(got.get(k) or self.returned[k] for k in sent) and \
            (not receipts or all(self.receipts[k] for k in sent if got.get(k)))


def fates(sent: dict, notices: dict) -> Fates:
    key_of = {(sender, msg_id): (sender, seq) for (sender, seq), (msg_id, _, _) in sent.items()}
    f = Fates(collections.Counter(), collections.Counter(), collections.Counter(), 0)
    for (sender, msg_id), found in notices.items():
        key = key_of.get((sender, msg_id))
        for n in found:
            if key is None or n["user_id"] != msg_id or not n["from_id"].endswith("MCCS") \
                    or str(n.get("to_id", "")).rstrip() != sent[key][2] \
                    or n["notice"] not in ("undeliverable", "delivered"):
                f.unknown += 1
            elif n["notice"] == "undeliverable":
                f.returned[key] += 1
                f.reasons[n.get("reason")] += 1
            else:
                f.receipts[key] += 1
    return f


def notice_verdict(sent: dict, got: dict, f: Fates, statuses: dict, receipts: bool) -> dict:
    """The verdict's part for a run with notices: each message delivered once or returned once,
    never both nor neither; a receipt exactly for each message delivered (if asked, else none); the
    lists empty on every host (a host that did not answer its status counts as not empty); no
    message held for a next host's maximum on any line."""
    left = {host: {k: n for k, n in status["lists"].items() if n} if status else "no status"
            for host, status in statuses.items()}
    left = {host: v for host, v in left.items() if v}
    lines = [line.get("counters", {}) for status in statuses.values() for line in status.get("lines", [])]
    out = {"returned": sum(1 for k in sent if f.returned[k] and not got.get(k)),
           "returned_and_delivered": sum(1 for k in sent if f.returned[k] and got.get(k)),
           "returned_twice": sum(1 for k in sent if f.returned[k] > 1),
           "receipts": sum(1 for k in sent if f.receipts[k] and got.get(k)),
           "receipts_missing": sum(1 for k in sent if receipts and got.get(k) and not f.receipts[k]),
           "receipts_twice": sum(1 for k in sent if f.receipts[k] > 1),
           "receipts_wrong": sum(1 for k in sent if f.receipts[k] and (not receipts or not got.get(k))),
           "notices_unknown": f.unknown, "reasons": dict(f.reasons), "left_on_lists": left,
           "too_large": sum(c.get("too_large", 0) for c in lines),
           "too_large_returned": sum(c.get("too_large_returned", 0) for c in lines)}
    out["notices_ok"] = not (left or out["too_large"] or out["too_large_returned"] or f.unknown or any(
        out[k] for k in ("returned_and_delivered", "returned_twice", "receipts_missing", "receipts_twice",
                         "receipts_wrong")))
    return out


def verdict(root: Path, planned: int, statuses: dict, notices: bool = False, receipts: bool = False) -> dict:
    """`notices`: the senders RECVed notices (a ttl or receipts): a message returned is not lost."""
    sent, got = read_logs(root)
    f = fates(sent, read_notices(root)) if notices else None
    lost = [k for k in sent if not got.get(k) and not (f and f.returned[k])]
    duplicated = [k for k, v in got.items() if len(v) > 1]
    unexpected = [k for k in got if k not in sent]  # received, but its SEND never returned
    order = collections.defaultdict(list)
    for path in sorted((root / "logs").glob("*.recv")):  # each receiver's log is in its RECV order
        for line in path.read_text().splitlines():
            sender, seq = line.split()[:2]
            order[(sender, path.stem)].append(int(seq))
    reordered = sum(1 for seqs in order.values() for a, b in zip(seqs, seqs[1:]) if b < a)
    latencies = sorted(v[0][1] for v in got.values())
    counters: collections.Counter[str] = collections.Counter()
    for status in statuses.values():
        for line in status.get("lines", []):
            for key in ("retransmissions", "crc_errors", "timeouts", "naks"):
                counters[key] += line.get("counters", {}).get(key, 0)
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else latencies * 99
    v = {"planned": planned, "sent": len(sent), "delivered": sum(1 for k in sent if got.get(k)),
         "lost": len(lost), "duplicated": len(duplicated), "out_of_order": reordered,
         "unexpected": len(unexpected),
         "latency_p50": q[49] if q else None, "latency_p95": q[94] if q else None,
         "latency_p99": q[98] if q else None, **counters,
         "lost_keys": [f"{s}:{n}" for s, n in lost[:20]], "ok": not (lost or duplicated or reordered or unexpected)
         and len(sent) == planned}
    if f is not None:
        v.update(notice_verdict(sent, got, f, statuses, receipts))
        v["ok"] = v["ok"] and v.pop("notices_ok")
    return v


def run_network(opts: Options) -> dict:
    """Run one loopback network to the end and return its verdict (see `verdict`)."""
    if opts.ttl is not None and not opts.ttl >= 0.1:
        raise ValueError("--ttl must be at least 0.1 s")
    if opts.kills < 0 or opts.disconnects < 0 or (opts.kills and not opts.kill_every) \
            or (opts.disconnects and not opts.disconnect_every):
        raise ValueError("--kills and --disconnects must be 0 or more, and need --kill-every and "
                         "--disconnect-every")
    root = Path(opts.dir) if opts.dir else Path(tempfile.mkdtemp(prefix="mccs-loopback-"))
    root.mkdir(parents=True, exist_ok=True)
    net = Network(opts, root)
    say = (lambda *a: None) if opts.quiet else (lambda text: print(text, file=sys.stderr, flush=True))
    rng = random.Random(opts.seed + 1)
    statuses = {}
    with net.vlines:
        net.configs()
        try:
            start_all(net.daemons.values())
            if net.routed:
                net.wait_for_routes()
            plans = net.plan_traffic()
            planned = sum(map(len, plans.values()))
            say(f"loopback: {len(net.hosts)} hosts, links {', '.join(f'{s} ({net.protocol[s]})' for s in net.links)}, "
                f"{opts.baud} baud, BER {opts.ber:g}, {planned} messages, in {root}")
            net.start_traffic(plans)
            t0 = time.monotonic()
            next_kill = t0 + opts.kill_every if opts.kill_every else None
            next_cut = t0 + opts.disconnect_every if opts.disconnect_every else None
            cut, kills, cuts, last_report = None, 0, 0, t0
            reconnect_at = 0.0  # when `cut` is reconnected (read only while a line is cut)
            hosts_cycle, lines_cycle = itertools.cycle(net.hosts), itertools.cycle(net.vlines.lines.values())
            while time.monotonic() - t0 < opts.timeout:
                time.sleep(0.1)
                now = time.monotonic()
                failed = [p for p in net.procs if p.poll() not in (None, 0)]
                if failed:
                    argv = cast(list[str], failed[0].args)  # Network starts each with a list of str
                    raise RuntimeError(f"a traffic process failed: {' '.join(argv[2:5])} "
                                       f"exited with {failed[0].returncode}")
                sent, got = read_logs(root)
                f = fates(sent, read_notices(root)) if opts.notices else None
                faults_done = kills >= opts.kills and cuts >= opts.disconnects and cut is None
                if len(sent) == planned and faults_done and net.settled(sent, got, f, now):
                    break
                if next_kill and now >= next_kill:
                    victim = net.daemons[next(hosts_cycle)]
                    victim.kill()
                    time.sleep(rng.uniform(0.05, 0.3))
                    victim.start()
                    kills += 1
                    next_kill = time.monotonic() + opts.kill_every if kills != opts.kills else None
                if next_cut and now >= next_cut and cut is None:
                    cut = next(lines_cycle)
                    cut.disconnect()
                    cuts += 1
                    reconnect_at = now + opts.disconnect_for
                if cut is not None and now >= reconnect_at:
                    cut.reconnect()
                    more = opts.disconnect_every and cuts != opts.disconnects
                    cut, next_cut = None, (now + opts.disconnect_every if more else None)
                if now - last_report >= 1.0:
                    last_report = now
                    delivered = sum(1 for k in sent if got.get(k))
                    notices = f"  returned {sum(1 for k in sent if f.returned[k])}  receipts " \
                        f"{sum(1 for k in sent if f.receipts[k])}" if f else ""
                    say(f"  [{now - t0:5.1f} s] sent {len(sent)}/{planned}  delivered {delivered}{notices}  "
                        f"kills {kills}  disconnects {cuts}")
            if cut is not None:
                cut.reconnect()
            net.stop_traffic()  # first: their RECVs wait on WAIT_LIST as long as they run
            for host, d in net.daemons.items():
                statuses[host] = _status(d)
        finally:
            net.stop()
    result = verdict(root, planned, statuses, opts.notices, opts.receipts)
    result["e2e"] = protection(root)
    result["refused"] = sum(s.get("counters", {}).get("refused", 0) for s in statuses.values() if s)
    if opts.e2e != "off":  # every message came protected as asked, and nothing was refused
        result["ok"] = result["ok"] and set(result["e2e"]) <= {"signed" if opts.e2e == "sign" else "sealed"} \
            and not result["refused"]
    result.update(elapsed=round(time.monotonic() - t0, 2), kills=kills, disconnects=cuts, dir=str(root),
                  trace_dirs=[d.cfg.trace_dir for d in net.daemons.values()])
    return result


def _status(d: DaemonProcess) -> dict:
    import mccs
    try:
        with mccs.connect(d.config, None, connect_timeout=5) as c:
            return c.status()
    except mccs.MCCSError:
        return {}


def print_verdict(v: dict, out=sys.stdout) -> None:
    rows = [("messages planned", v["planned"]), ("sent (MSG_ID returned)", v["sent"]),
            ("delivered", v["delivered"]), ("lost", v["lost"]), ("duplicated", v["duplicated"]),
            ("out of order", v["out_of_order"]), ("delivered but never sent", v["unexpected"])]
    if "returned" in v:  # a run with notices: "lost" is neither delivered nor returned
        reasons = ", ".join(f"{k} {n}" for k, n in sorted(v["reasons"].items(), key=str))
        left = "; ".join(f"{h} {x}" for h, x in v["left_on_lists"].items()) or "nothing"
        rows += [("returned undeliverable", f"{v['returned']}" + (f" ({reasons})" if reasons else "")),
                 ("delivered and returned", v["returned_and_delivered"]), ("returned twice", v["returned_twice"]),
                 ("receipts (delivered notices)", v["receipts"]), ("receipts missing", v["receipts_missing"]),
                 ("receipts twice", v["receipts_twice"]), ("receipts not due", v["receipts_wrong"]),
                 ("notices about nothing sent", v["notices_unknown"]), ("left on lists", left),
                 ("too_large (line counters)", v["too_large"]), ("too_large_returned", v["too_large_returned"])]
    if set(v.get("e2e", {})) - {"none"} or v.get("refused"):
        rows += [("how they came (e2e)", ", ".join(f"{k} {n}" for k, n in sorted(v["e2e"].items()))),
                 ("refused at a destination", v.get("refused", 0))]
    for key in ("latency_p50", "latency_p95", "latency_p99"):
        if v.get(key) is not None:
            rows.append((f"latency {key[-3:]} (s)", f"{v[key]:.3f}"))
    rows += [(k, v.get(k, 0)) for k in ("retransmissions", "crc_errors", "timeouts", "naks")]
    rows += [("daemons killed (kill -9)", v["kills"]), ("line disconnects", v["disconnects"]),
             ("elapsed (s)", v["elapsed"])]
    width = max(len(r[0]) for r in rows)
    print("MCCS loopback verdict", file=out)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}", file=out)
    print(f"  {'VERDICT':<{width}}  {'PASS' if v['ok'] else 'FAIL'}", file=out)
    if v["lost_keys"]:
        print(f"  lost (first ones): {' '.join(v['lost_keys'])}", file=out)


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = Options()
    p.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    p.add_argument("--hosts", type=int, default=d.hosts, help="number of hosts (AA, BB, CC, ...)")
    p.add_argument("--links", default=None, help="comma-separated links like AA-BB,BB-CC (default: full mesh)")
    p.add_argument("--topology", choices=TOPOLOGIES, default=None,
                   help="lines in this shape, and traffic between any two hosts (routed over async lines)")
    p.add_argument("--routed", action="store_true",
                   help="with --links: traffic between any two hosts routing joins, not only neighbours")
    p.add_argument("--protocol", choices=("async", "bsc", "mixed"), default=d.protocol,
                   help="line protocol; mixed: the first link BSC, the others async")
    p.add_argument("--baud", type=int, default=d.baud, help="virtual line speed")
    p.add_argument("--ber", type=float, default=d.ber, help="bit-error rate on every line")
    p.add_argument("--messages", type=int, default=d.messages, help="messages in all")
    p.add_argument("--senders", type=int, default=d.senders, help="sender processes per host")
    p.add_argument("--receivers", type=int, default=d.receivers, help="receiver processes per host")
    p.add_argument("--size", type=int, default=d.size, help="bytes of MESSAGE (at most 128)")
    p.add_argument("--disconnect-every", type=float, default=d.disconnect_every,
                   help="seconds between line disconnects, one line at a time (0: none)")
    p.add_argument("--disconnect-for", type=float, default=d.disconnect_for, help="seconds a line stays cut")
    p.add_argument("--kill-every", type=float, default=d.kill_every,
                   help="seconds between kill -9 of a daemon, round robin, restarted at once (0: none)")
    p.add_argument("--kills", type=int, default=d.kills,
                   help="this many kills, the run going on until they are done (0: as long as the traffic lasts)")
    p.add_argument("--disconnects", type=int, default=d.disconnects,
                   help="this many line disconnects, the run going on until they are done (0: as long as the "
                        "traffic lasts)")
    p.add_argument("--ttl", type=float, default=argparse.SUPPRESS, metavar="S",
                   help="each message may wait S seconds on the way, then comes back to its sender as an "
                        "undeliverable notice (default: the host's ttl); the senders RECV their notices, and the "
                        "verdict wants each message delivered once or returned once, never both, every list "
                        "empty at the end and no line's too_large counter above zero")
    p.add_argument("--receipts", action="store_true",
                   help="each message asks for a delivered notice, which its sender RECVs; the verdict wants "
                        "exactly one for each message delivered (and what --ttl says of notices and lists)")
    p.add_argument("--timeout", type=float, default=d.timeout, help="give up after this many seconds")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--dir", default=None, help="keep configs, checkpoints, traces and logs here")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--e2e", choices=("off", "sign", "seal"), default=d.e2e,
                   help="every host signs or seals its messages end to end, each trusting all the others' keys")
    p.add_argument("--fault-drop-received", type=int, default=0, help=argparse.SUPPRESS)


def options_from(args: argparse.Namespace) -> Options:
    fields = {f.name for f in dataclasses.fields(Options)}
    opts = Options(**{k: v for k, v in vars(args).items() if k in fields})
    if isinstance(opts.links, str):
        opts.links = [s.strip() for s in opts.links.split(",") if s.strip()]
    return opts


def run(args: argparse.Namespace) -> int:
    stop_on_sigterm()
    try:
        opts = options_from(args)
        if not 1 <= opts.size <= 128:
            raise ValueError("--size must be from 1 to 128")
        v = run_network(opts)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: run_network has stopped what it started
        print("mccs loopback: interrupted; its daemons, traffic processes and lines are stopped", file=sys.stderr)
        return 0
    except ValueError as e:
        print(f"mccs loopback: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"mccs loopback: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(v, indent=2))
    else:
        print_verdict(v)
    return 0 if v["ok"] else 1
