"""Synthetic MCCS traces (docs/DESIGN.md section 6) with known answers.

The generator simulates a network of hosts joined by async and BSC lines closely enough for
the analytics to meet every kind of event a real daemon writes: sign-ons, keep-alives, data
frames with bad checks, rejects, lost frames and acks (timeouts, retries, retransmissions,
duplicate arrivals), busy answers, line outages, lost, pending and doubly delivered messages,
and MSG_IDs reused after wrap-around. It keeps its own tally of what it wrote, so
`generate()` returns the figures `mccs analyze` must find; tests compare the two, and the
benchmark uses it for large inputs. Events are formatted with string templates (not
json.dumps) so ten million of them take about a minute. What to generate is a `TraceSpec`
(tracegen_spec); the files are written by tracegen_files, the answers worked out in
tracegen_answers.

    python -m mccs.testbed.tracegen OUT_DIR --hosts 6 --lines 8 --messages 20000 --duration 7200
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from collections import Counter, defaultdict
from pathlib import Path

from mccs.analytics.schema import DATA_KINDS, MINUTE
from mccs.testbed.tracegen_answers import (DirTally, high_water, known_answers, latency_stats, percentile,
                                           up_seconds)
from mccs.testbed.tracegen_files import TraceWriter
from mccs.testbed.tracegen_spec import TraceSpec, host_ids, line_name, topology

# The spec's and the answers' names stay importable from here, where callers have always found them.
__all__ = ["RETRIES", "TraceSpec", "host_ids", "topology", "line_name", "Generator", "up_seconds", "high_water",
           "percentile", "latency_stats", "generate", "main"]

RETRIES = 7                           # transmissions of one frame before the generator forces success


class _Msg:
    __slots__ = ("origin", "msg_id", "dest", "accepted", "acked", "received", "delivered",
                 "last", "local")

    def __init__(self, origin: str, msg_id: int, dest: str, t: float) -> None:
        self.origin, self.msg_id, self.dest, self.accepted = origin, msg_id, dest, t
        self.acked: float | None = None     # when its sender had the acknowledgement
        self.received: float | None = None  # when it first reached its destination
        self.delivered: list[float] = []
        self.last = t
        self.local = origin == dest


class Generator:
    """One simulation run; `run()` writes the files and returns the known answers."""

    def __init__(self, trace_dir: str | os.PathLike, spec: TraceSpec):
        self.spec = spec
        self.rnd = random.Random(spec.seed)
        self.hosts = host_ids(spec.hosts)
        self.pairs = topology(self.hosts, spec.lines)
        self.neigh: dict[str, list[str]] = defaultdict(list)
        self.proto: dict[str, str] = {}
        self.baud: dict[str, int] = {}
        for i, (a, b) in enumerate(self.pairs):
            self.neigh[a].append(b)
            self.neigh[b].append(a)
            name = line_name(a, b)
            self.proto[name] = "async" if i % 2 == 0 else "bsc"
            self.baud[name] = self.rnd.choice(spec.bauds)
        self.out = TraceWriter(Path(trace_dir), spec, self.hosts)
        self.dirs: dict[tuple[str, str, str], DirTally] = defaultdict(DirTally)
        self.line_events: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
        self.line_counts: Counter = Counter()           # (host, peer, kind)
        self.msg_counts: Counter = Counter()            # (host, kind)
        self.seq: Counter = Counter()                   # async SEQ per (host, peer)
        self.outages: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.msgs: list[_Msg] = []
        self.key_busy: dict[tuple[str, int], float] = {}
        self.line_free: dict[str, float] = defaultdict(lambda: -math.inf)   # one transfer at a time
        self.t_min, self.t_max = math.inf, -math.inf
        self.events = 0
        self.extra = 0

    # -- writing events -------------------------------------------------------------------
    def _emit(self, host: str, ts: float, text: str) -> None:
        if ts < self.t_min:
            self.t_min = ts
        if ts > self.t_max:
            self.t_max = ts
        self.events += 1
        if self.spec.unknown_fields:
            self.extra += 1
            if self.extra % 97 == 0:
                text = text[:-2] + ',"note":{"by":"tracegen"}}\n'
        self.out.add(host, ts, text)

    def frame(self, ts, host, peer, dir_, kind, nbytes, ok=True, retransmit=False, msg=None, count=1):
        name = line_name(host, peer)
        proto = self.proto[name]
        extra = ""
        if proto == "async":
            seq = 0
            if kind == "D":
                seq = self.seq[(host, peer, dir_)] % 256
                self.seq[(host, peer, dir_)] += 1
            extra = f',"seq":{seq}'
        if msg is not None:
            extra += f',"origin":"{msg.origin}","msg_id":{msg.msg_id}'
        if retransmit:
            extra += ',"retransmit":true'
        if count > 1:  # a run of damaged frames the daemon traces as one
            extra += f',"frames":{count}'
        self._emit(host, ts, f'{{"v":1,"ts":{ts!r},"host":"{host}","line":"{peer}","proto":"{proto}",'
                             f'"type":"frame","dir":"{dir_}","kind":"{kind}","bytes":{nbytes},'
                             f'"ok":{"true" if ok else "false"}{extra}}}\n')
        d = self.dirs[(name, host, dir_)]
        d.kinds[kind] += count
        d.bytes += nbytes
        d.minutes[math.floor(ts / MINUTE)] += nbytes
        if kind in DATA_KINDS:
            d.data_frames += 1
            if ok and not retransmit and msg is not None:
                d.data_messages += 1
        if retransmit:
            d.retransmissions += 1
        if not ok:
            d.crc += count

    def exchange(self, ts, src, dst, kind, nbytes, ok=True, retransmit=False, msg=None, lost=False):
        """src sends a frame, dst receives it (with ok) unless lost; returns the arrival time."""
        self.frame(ts, src, dst, "tx", kind, nbytes, True, retransmit, msg)
        arrive = ts + nbytes * 10 / self.baud[line_name(src, dst)] + self.rnd.uniform(0.0005, 0.003)
        if not lost:
            if self.spec.noise_rate and self.rnd.random() < self.spec.noise_rate:
                runs = self.rnd.randint(2, 40)
                self.frame(arrive - 0.0005, dst, src, "rx", "?", 3 * runs, False, count=runs)
            self.frame(arrive, dst, src, "rx", kind, nbytes, ok, False, msg)
        return arrive

    def line_event(self, ts, host, peer, kind, baud=None):
        name = line_name(host, peer)
        extra = f',"baud":{baud}' if baud is not None else ""
        self._emit(host, ts, f'{{"v":1,"ts":{ts!r},"host":"{host}","line":"{peer}",'
                             f'"proto":"{self.proto[name]}","type":"line","kind":"{kind}"{extra}}}\n')
        self.line_counts[(host, peer, kind)] += 1
        if kind in ("up", "down"):
            self.line_events[(host, peer)].append((ts, kind))

    def msg_event(self, ts, host, kind, m: _Msg, peer=None):
        line = f'"line":"{peer}","proto":"{self.proto[line_name(host, peer)]}",' if peer else ""
        self._emit(host, ts, f'{{"v":1,"ts":{ts!r},"host":"{host}",{line}"type":"msg","kind":"{kind}",'
                             f'"origin":"{m.origin}","msg_id":{m.msg_id},"from_id":"{m.origin}SND ",'
                             f'"to_id":"{m.dest}RCV ","user_id":{m.msg_id}}}\n')
        self.msg_counts[(host, kind)] += 1
        m.last = max(m.last, ts)

    # -- the simulation -------------------------------------------------------------------
    def run(self) -> dict:
        s, rnd = self.spec, self.rnd
        end = s.start + s.duration
        self._lines_timeline(end)
        counters = {h: rnd.randrange(s.id_space) for h in self.hosts}
        n_special = s.lost + s.pending + s.duplicated
        if n_special > s.messages:
            raise ValueError("lost + pending + duplicated exceed messages")
        special = rnd.sample(range(s.messages), n_special)
        fate = {i: "lost" for i in special[:s.lost]}
        fate.update({i: "pending" for i in special[s.lost:s.lost + s.pending]})
        fate.update({i: "duplicated" for i in special[s.lost + s.pending:]})
        times = sorted(rnd.uniform(s.start + 1.0, s.start + s.duration * 0.9) for _ in range(s.messages))
        last_accept = {h: -math.inf for h in self.hosts}
        horizon = s.outage_seconds[1] + 120.0
        for i, t in enumerate(times):
            origin = rnd.choice(self.hosts)
            dest = origin if rnd.random() < s.local_share else rnd.choice(self.neigh[origin])
            msg_id = counters[origin] % s.id_space
            counters[origin] += 1
            t = max(t, last_accept[origin] + 1e-4, self.key_busy.get((origin, msg_id), -math.inf) + 0.01)
            last_accept[origin] = t
            m = _Msg(origin, msg_id, dest, t)
            self.msgs.append(m)
            self._message(m, fate.get(i, "normal"))
            self.key_busy[(origin, msg_id)] = m.last
            if i % 20000 == 19999:
                self.out.flush(t - horizon)
        self._inject_malformed()
        self.out.close()
        return known_answers(self)

    def _lines_timeline(self, end: float) -> None:
        """Sign-ons at the start, outages, keep-alives; line events at both ends."""
        s, rnd = self.spec, self.rnd
        for _ in range(s.outages):
            a, b = rnd.choice(self.pairs)
            length = rnd.uniform(*s.outage_seconds)
            t0 = rnd.uniform(s.start + 60, end - length - 10)
            name = line_name(a, b)
            if all(t0 > e + 5 or t0 + length < b0 - 5 for b0, e in self.outages[name]):
                self.outages[name].append((t0, t0 + length))
        for a, b in self.pairs:
            name = line_name(a, b)
            self._signon(s.start + rnd.uniform(0, 0.5), a, b)
            for t0, t1 in sorted(self.outages[name]):
                self._outage(t0, t1, a, b)
            if self.proto[name] == "async":
                t = s.start + s.keepalive
                while t < end:
                    if not self._down(name, t):
                        self.exchange(t, a, b, "P", 7)
                        self.exchange(t + 0.2, b, a, "P", 7)
                    t += s.keepalive

    def _signon(self, t, a, b):
        name = line_name(a, b)
        baud = self.baud[name]
        if self.proto[name] == "async":
            t = self.exchange(t, a, b, "S", 40)
            t = self.exchange(t + 0.001, b, a, "T", 40)
        else:
            t = self.exchange(t, a, b, "ID", 12)
            t = self.exchange(t + 0.001, b, a, "ID", 13)
        self.line_event(t + 0.0005, b, a, "up", baud)
        self.line_event(t + 0.001, a, b, "up", baud)

    def _outage(self, t0, t1, a, b):
        """A cable pulled: both ends time out, retry and go DOWN, then sign on again."""
        rnd = self.rnd
        for h, p in ((a, b), (b, a)):
            t = t0 + rnd.uniform(0, 2)
            for _ in range(2):
                self.line_event(t, h, p, "timeout")
                self.line_event(t + 0.001, h, p, "retry")
                t += 3.0
            self.line_event(t0 + 7 + rnd.uniform(0, 1), h, p, "down")
        self._signon(t1, a, b)

    def _down(self, name: str, t: float) -> float | None:
        """The end of the outage of `name` that covers t (with a margin), else None."""
        for t0, t1 in self.outages[name]:
            if t0 - 5 <= t <= t1 + 1:
                return t1 + 1 + self.rnd.uniform(0.1, 2)
        return None

    def _message(self, m: _Msg, fate: str) -> None:
        rnd = self.rnd
        self.msg_event(m.accepted, m.origin, "accepted", m)
        if fate == "lost":
            return
        t = m.accepted + rnd.uniform(0.001, 0.05)
        if m.local:
            m.received = t
            self.msg_event(t, m.dest, "received", m)
        else:
            name = line_name(m.origin, m.dest)
            t = max(t, self.line_free[name])
            t = self._down(name, t) or t
            size = 18 + rnd.randint(1, self.spec.max_message)
            send = self._send_async if self.proto[name] == "async" else self._send_bsc
            self.line_free[name] = send(t, m, size)
        if fate == "pending":
            return
        assert m.received is not None  # set above, or by the line's send (the last attempt always gets through)
        t = m.received + rnd.expovariate(2.0) + 0.002
        m.delivered.append(t)
        self.msg_event(t, m.dest, "delivered", m)
        if fate == "duplicated":
            t += rnd.uniform(1, 30)
            m.delivered.append(t)
            self.msg_event(t, m.dest, "delivered", m)

    def _send_async(self, t, m: _Msg, size) -> float:
        """D frames until acknowledged; returns when the line is free again."""
        s, rnd = self.spec, self.rnd
        o, d = m.origin, m.dest
        nbytes = 7 + size + rnd.choice((0, 0, 0, 1, 2))
        timeout = 2 * 8 * nbytes * 10 / self.baud[line_name(o, d)] + 1.0
        self.msg_event(t, o, "sent", m, d)
        for attempt in range(RETRIES):
            last = attempt == RETRIES - 1
            r = rnd.random()
            lost = not last and r < s.frame_loss_rate
            bad = not last and not lost and r < s.frame_loss_rate + s.frame_error_rate
            arrive = self.exchange(t + 0.0001, o, d, "D", nbytes, not bad, attempt > 0, m, lost)
            if lost:
                self.line_event(t + timeout, o, d, "timeout")
                self.line_event(t + timeout + 0.001, o, d, "retry")
                t += timeout + 0.002
                continue
            if bad:
                t = self.exchange(arrive + 0.001, d, o, "N", 7) + 0.001
                continue
            if m.received is None:
                m.received = arrive + 0.0005
                self.msg_event(m.received, d, "received", m, o)
            else:
                self.msg_event(arrive + 0.0005, d, "duplicate", m, o)
            t = arrive + 0.001
            if rnd.random() < s.busy_rate:
                t = self.exchange(t, d, o, "B", 7) + rnd.uniform(0.5, 2)
            ack_lost = not last and rnd.random() < s.ack_loss_rate
            t = self.exchange(t, d, o, "A", 7, lost=ack_lost)
            if ack_lost:
                self.line_event(t + timeout, o, d, "timeout")
                self.line_event(t + timeout + 0.001, o, d, "retry")
                t += timeout + 0.002
                continue
            m.acked = t + 0.0005
            self.msg_event(m.acked, o, "acked", m, d)
            return m.acked
        raise AssertionError("unreachable: the last attempt is never lost")

    def _send_bsc(self, t, m: _Msg, size) -> float:
        """Bid, blocks until acknowledged, EOT; returns when the line is free again."""
        s, rnd = self.spec, self.rnd
        o, d = m.origin, m.dest
        timeout = 2.7
        while True:                                      # line bid
            t = self.exchange(t, o, d, "ENQ", 5)
            if rnd.random() >= s.busy_rate:
                break
            t = self.exchange(t + 0.001, d, o, "WACK", 5) + rnd.uniform(0.5, 2)
        t = self.exchange(t + 0.001, d, o, "ACK0", 5) + 0.001
        self.msg_event(t, o, "sent", m, d)
        if rnd.random() < s.busy_rate:                   # sender needs time: TTD, answered NAK
            t = self.exchange(t, o, d, "TTD", 4)
            t = self.exchange(t + 0.001, d, o, "NAK", 5) + 0.001
        nbytes = 9 + size + rnd.choice((0, 0, 0, 1))
        for attempt in range(RETRIES):
            last = attempt == RETRIES - 1
            r = rnd.random()
            lost = not last and r < s.frame_loss_rate
            bad = not last and not lost and r < s.frame_loss_rate + s.frame_error_rate
            arrive = self.exchange(t, o, d, "ETX", nbytes, not bad, attempt > 0, m, lost)
            if lost:                                    # no answer: ENQ asks for the last reply
                self.line_event(t + timeout, o, d, "timeout")
                self.line_event(t + timeout + 0.001, o, d, "retry")
                t = self.exchange(t + timeout + 0.002, o, d, "ENQ", 5)
                t = self.exchange(t + 0.001, d, o, "ACK0", 5) + 0.001
                continue
            if bad:
                t = self.exchange(arrive + 0.001, d, o, "NAK", 5) + 0.001
                continue
            break
        m.received = arrive + 0.0005
        self.msg_event(m.received, d, "received", m, o)
        reply = "RVI" if rnd.random() < s.busy_rate else "ACK1"
        t = self.exchange(arrive + 0.001, d, o, reply, 5)
        m.acked = t + 0.0005
        self.msg_event(m.acked, o, "acked", m, d)
        return self.exchange(m.acked + 0.001, o, d, "EOT", 4)

    def _inject_malformed(self) -> None:
        bad = ['not json at all', '{"v":1,"ts":', '{"v":1,"ts":"yesterday","host":"AA","type":"frame"}',
               '{"v":1,"host":"AA","type":"msg","kind":"accepted"}', '\x00\x01garbage\x7f',
               '{"v":1,"ts":1700000000.5,"type":"frame","kind":"D"}', '{"v":1,"ts":1700000000.5,"host":"AA"}']
        for i in range(self.spec.malformed):
            host = self.rnd.choice(self.hosts)
            buf = self.out.buf[host]
            ts = buf[self.rnd.randrange(len(buf))][0] if buf else self.spec.start
            self.out.add(host, ts, bad[i % len(bad)] + "\n")


def generate(trace_dir: str | os.PathLike, spec: TraceSpec | None = None, **overrides) -> dict:
    """Write traces for `spec` (fields may be overridden by keyword) and return the known answers."""
    spec = spec or TraceSpec()
    if overrides:
        spec = TraceSpec(**{**spec.__dict__, **overrides})
    return Generator(trace_dir, spec).run()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mccs.testbed.tracegen", description=__doc__.split("\n\n")[0])
    p.add_argument("trace_dir")
    defaults = TraceSpec()
    for name in ("hosts", "lines", "messages", "duration", "seed", "outages", "lost", "pending",
                 "duplicated", "malformed", "rotate_events", "id_space"):
        value = getattr(defaults, name)
        p.add_argument(f"--{name.replace('_', '-')}", type=float if isinstance(value, float) else int,
                       default=value)
    p.add_argument("--no-gzip", action="store_true", help="leave rotated files uncompressed")
    p.add_argument("--answers", help="write the known answers to this JSON file")
    a = p.parse_args(argv)
    spec = TraceSpec(**{k: v for k, v in vars(a).items() if k in TraceSpec.__dataclass_fields__},
                     compress_rotated=not a.no_gzip)
    answers = generate(a.trace_dir, spec)
    if a.answers:
        Path(a.answers).write_text(json.dumps(answers, indent=1))
    print(f"{answers['input']['events']} events, {answers['messages']['accepted']} messages, "
          f"{len(answers['files'])} files under {a.trace_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
