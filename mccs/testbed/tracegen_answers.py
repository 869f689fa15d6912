"""The known answers of a generated trace: the tally `tracegen` keeps of every frame it writes,
and the figures `mccs analyze` must find, worked out from it by plain Python so the tests can
hold the Spark job against them."""
from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

from mccs.analytics.schema import MINUTE, REJECT_KINDS, line_rows
from mccs.testbed.tracegen_spec import line_name

if TYPE_CHECKING:
    from mccs.testbed.tracegen import Generator


class DirTally:
    """The tally of one (line, host, dir) row, kept as events are written."""
    __slots__ = ("kinds", "bytes", "data_frames", "data_messages", "retransmissions", "crc", "minutes")

    def __init__(self) -> None:
        self.kinds: Counter = Counter()
        self.bytes = self.data_frames = self.data_messages = self.retransmissions = self.crc = 0
        self.minutes: Counter = Counter()


def known_answers(gen: Generator) -> dict:
    """The figures `mccs analyze` must find in what `gen` wrote, from its own tally."""
    ws, we = gen.t_min, gen.t_max
    span = we - ws
    directions = []
    for (a, b) in gen.pairs:
        name = line_name(a, b)
        baud = gen.baud[name]
        for host, peer in ((a, b), (b, a)):
            up = up_seconds(gen.line_events[(host, peer)], ws, we)
            for dir_ in ("rx", "tx"):
                d = gen.dirs[(name, host, dir_)]
                other = gen.dirs[(name, host, "tx" if dir_ == "rx" else "rx")]
                naks = sum(d.kinds[k] for k in REJECT_KINDS)
                cap = baud / 10.0
                directions.append({
                    "line": name, "host": host, "peer": peer, "dir": dir_, "proto": gen.proto[name],
                    "baud": baud, "frames": sum(d.kinds.values()),
                    "frames_by_kind": {k: v for k, v in sorted(d.kinds.items())},
                    "bytes": d.bytes, "data_frames": d.data_frames, "data_messages": d.data_messages,
                    "retransmissions": d.retransmissions, "naks": naks,
                    "reject_rate": naks / other.data_frames if other.data_frames else None,
                    "crc_failures": d.crc,
                    "timeouts": gen.line_counts[(host, peer, "timeout")] if dir_ == "tx" else 0,
                    "retries": gen.line_counts[(host, peer, "retry")] if dir_ == "tx" else 0,
                    "downs": gen.line_counts[(host, peer, "down")],
                    "up_seconds": up, "availability": up / span if span > 0 else None,
                    "utilisation": d.bytes / cap / up if up > 0 else None,
                    "utilisation_peak_minute": max(d.minutes.values()) / cap / MINUTE if d.minutes else None,
                })
    directions.sort(key=lambda r: (r["line"], r["host"], r["dir"]))
    return {
        "input": {"events": gen.events, "malformed": gen.spec.malformed,
                  "window": {"start": ws, "end": we, "seconds": span}},
        "directions": directions,
        "lines": line_rows(directions),
        "messages": _message_answers(gen),
        "hosts": _host_answers(gen),
        "accepted_times": sorted(m.accepted for m in gen.msgs),
        "files": [str(p) for p in gen.out.paths],
    }


def _message_answers(gen: Generator) -> dict:
    lat = sorted(m.delivered[0] - m.accepted for m in gen.msgs if m.delivered)
    return {
        "accepted": len(gen.msgs),
        "delivered": sum(1 for m in gen.msgs if m.delivered),
        "lost": sum(1 for m in gen.msgs if m.received is None and not m.delivered),
        "pending": sum(1 for m in gen.msgs if m.received is not None and not m.delivered),
        "duplicated": sum(1 for m in gen.msgs if len(m.delivered) > 1),
        "duplicate_arrivals": sum(v for (h, k), v in gen.msg_counts.items() if k == "duplicate"),
        "unmatched": 0,
        "latency": latency_stats(lat),
    }


def _host_answers(gen: Generator) -> list[dict]:
    steps: dict[str, dict[str, list]] = {h: {"send": [], "recv": []} for h in gen.hosts}
    for m in gen.msgs:
        if not m.local:
            steps[m.origin]["send"].append((m.accepted, 1))
            if m.acked is not None:
                steps[m.origin]["send"].append((m.acked, -1))
        if m.received is not None:
            steps[m.dest]["recv"].append((m.received, 1))
            if m.delivered:
                steps[m.dest]["recv"].append((m.delivered[0], -1))
    rows = []
    for h in gen.hosts:
        c = {k: gen.msg_counts[(h, k)] for k in ("accepted", "sent", "acked", "received", "delivered",
                                                  "duplicate")}
        rows.append({"host": h, **{k: v for k, v in c.items() if k != "duplicate"},
                     "duplicates_dropped": c["duplicate"],
                     "send_list_hwm": high_water(steps[h]["send"]),
                     "recv_list_hwm": high_water(steps[h]["recv"])})
    return rows


def up_seconds(events: list[tuple[float, str]], ws: float, we: float) -> float:
    """Seconds UP within [ws, we] from one host's up/down events of a line (unknown = down,
    except that a first event `down` means the line was up before it)."""
    events = sorted(events)
    total = 0.0
    since = ws if events and events[0][1] == "down" else None
    for ts, kind in events:
        if kind == "up" and since is None:
            since = ts
        elif kind == "down" and since is not None:
            total += max(0.0, min(ts, we) - max(since, ws))
            since = None
    if since is not None:
        total += max(0.0, we - max(since, ws))
    return total


def high_water(steps: list[tuple[float, int]]) -> int:
    """Largest running sum of +1/-1 steps in time order (decrements first on a tie)."""
    level = top = 0
    for _, delta in sorted(steps):
        level += delta
        top = max(top, level)
    return top


def percentile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, Spark's `percentile`)."""
    pos = (len(sorted_values) - 1) * p
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi:
        return sorted_values[lo]
    return (hi - pos) * sorted_values[lo] + (pos - lo) * sorted_values[hi]


def latency_stats(sorted_lat: list[float]) -> dict:
    if not sorted_lat:
        return {"count": 0, "mean": None, "p50": None, "p95": None, "p99": None, "max": None}
    return {"count": len(sorted_lat), "mean": sum(sorted_lat) / len(sorted_lat),
            "p50": percentile(sorted_lat, 0.5), "p95": percentile(sorted_lat, 0.95),
            "p99": percentile(sorted_lat, 0.99), "max": sorted_lat[-1]}
