"""The summary.json contract of `mccs analyze` (version, field order) and the per-line roll-up.

Kept apart from the Spark job so the trace generator can state its known answers in exactly
the same shape without importing Spark.

Routed traffic (issue 11; keys added within version 1, docs/ANALYTICS.md's table lists the others):

| key | meaning |
|---|---|
| `messages.expired` | accepted messages with an `expired` event (hop limit, ttl) and never delivered: removed on purpose, their sender told; not counted in `lost` nor `pending` |
| `messages.refused` | arrivals a destination refused (`refused` events: end-to-end protection, `accept_from`, a bad segment) |
| `messages.refused_by_reason` | those by `reason`: `bad_tag`, `untrusted`, `unsigned`, `ttl_raised`, `not_accepted`, `old_key`, `mode`, `replay`, or `"other"` (docs/E2E.md) |
| `messages.expired_by_reason` | those by the `reason` of their `expired` event: `{"hop limit": n, "ttl": n}`, plus `"other"` (another reason or none) when there is one |
| `messages.latency_received` | `count`, `mean`, `p50`, `p95`, `p99`, `max` of the seconds from `accepted` at the origin to the first `received` at the destination, over the messages received |
| `messages.notices` | notices (messages a daemon made, FROM_ID host + `MCCS`; their `accepted` carries `notice`): `accepted`, `delivered` (taken by their process), `lost`, and `by_kind` `{"delivered": n, "undeliverable": n}` (+ `"other"`). Notices are counted in the other message figures too |
| `routing.forwarded_events` | `forwarded` events (a transit host stored a message for its next hop), unmatched ones included |
| `routing.forwarded_messages` | accepted messages forwarded at least once |
| `routing.hops` | `[{"hops": h, "messages": n}, ...]`: the delivered messages by lines crossed to their destination, from their first `received` (`hops` on a routed arrival; none: 1 line over a version-1 line, 0 for a message to a process of its own host); also `hops_histogram.csv` |
| `routing.hops_mean`, `routing.hops_max` | mean and largest of those (null without delivered messages) |
| `routing.latency_per_hop` | `count`, `mean`, `p50`, `p95`, `p99`, `max` of accepted -> first received divided by the lines crossed, per received message that crossed a line |
| `routing.route_changes` | `line` events of kind `route` (a host's route to a destination changed) |
| `calls` | per host and line that is a call (docs/CALLS.md), from its `call` events: `host`, `line` (the peer), `dialled`, `answered`, `connected`, `failed` `{"BUSY": n, ...}` by result, `connected_seconds` (of the calls hung up), `data_share` (message frames' bytes both ways over what the line could carry both ways while connected; null without a baud or a finished call); `[]` without calls |
| `hosts[].forwarded`, `hosts[].expired` | the host's `forwarded` and `expired` events (also in `hosts.csv`, after the old columns) |

`message_problems.csv` (columns `origin, msg_id, accepted, status, path`) lists the lost, pending,
doubly delivered and (status `expired`) expired messages. `path` is the hosts the message was
at, in time order, from its `accepted`, `forwarded`, `received`, `duplicate` and `expired`
events, a stay at a host once: `AA>BB>CC`; a lost message's path ends at the last host that
had it. Only the first PATH_SLOTS arrivals are kept; a longer path (a routing loop) ends with
`>...`. Time order across hosts assumes their clocks agree, as the latencies do.
"""
from __future__ import annotations

from collections import defaultdict

SCHEMA = "mccs-analyze-summary"
SCHEMA_VERSION = 1

DATA_KINDS = ("D", "ETB", "ETX")        # frames that carry a message image
REJECT_KINDS = ("N", "NAK")             # async reject, BSC negative acknowledgement
# msg event kinds, in the order that breaks ties of equal timestamps (the order they happen in)
MSG_KINDS = ("accepted", "sent", "forwarded", "acked", "received", "delivered", "duplicate", "expired")
ARRIVAL_KINDS = ("accepted", "forwarded", "received", "duplicate", "expired")   # a message is at the host
EXPIRY_REASONS = ("hop limit", "ttl")   # `reason` of `expired`; any other is counted as "other"
#: `reason` of an end-to-end `refused` (mccs.core.e2e); a refused segment's, a sentence, is "other"
REFUSAL_REASONS = ("bad_tag", "untrusted", "unsigned", "ttl_raised", "not_accepted", "old_key", "mode", "replay")
NOTICE_KINDS = ("delivered", "undeliverable")   # `notice` of a notice's `accepted`; any other: "other"
PATH_SLOTS = 8                          # hosts of a message's path kept (more end the path with ">...")
PERCENTILES = (0.5, 0.95, 0.99)
MINUTE = 60.0
# Widths of the report's time bins (seconds): the smallest that cuts the window in at most
# MAX_BINS; under a minute only for a window shorter than SUBMINUTE_WINDOW (a longer one has
# enough minutes for a curve, and its bins are sums of the minutes counted anyway).
TIME_BINS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
             172800, 604800)
MAX_BINS = 200
SUBMINUTE_WINDOW = 30 * MINUTE

# Column order of the CSV tables (and of the rows in summary.json).
DIRECTION_COLUMNS = ("line", "host", "peer", "dir", "proto", "baud", "frames", "bytes", "data_frames",
                     "data_messages", "retransmissions", "naks", "reject_rate", "crc_failures", "timeouts",
                     "retries", "downs", "up_seconds", "availability", "utilisation",
                     "utilisation_peak_minute")
LINE_COLUMNS = ("line", "proto", "baud", "frames", "bytes", "data_messages", "retransmissions",
                "crc_failures", "timeouts", "outages", "up_seconds", "availability")
HOST_COLUMNS = ("host", "accepted", "sent", "acked", "received", "delivered", "duplicates_dropped",
                "send_list_hwm", "recv_list_hwm", "forwarded", "expired")
PROBLEM_COLUMNS = ("origin", "msg_id", "accepted", "status", "path")
HOPS_COLUMNS = ("hops", "messages")


def time_bin(seconds: float) -> int:
    """The width of the time plots' bins for a window of `seconds`."""
    width = next((b for b in TIME_BINS if b * MAX_BINS >= seconds), TIME_BINS[-1])
    return width if width >= MINUTE or seconds < SUBMINUTE_WINDOW else int(MINUTE)


def verdict(summary: dict) -> dict:
    """What the report opens with: the messages' fate, the lines' mean availability and the
    worst line (the least available; of equals, the most retransmissions per message)."""
    m = summary["messages"]

    def retransmission_rate(ln: dict) -> float | None:
        return ln["retransmissions"] / ln["data_messages"] if ln["data_messages"] else None

    lines = summary["lines"]
    known = [ln["availability"] for ln in lines if ln["availability"] is not None]
    worst = min(lines, default=None, key=lambda ln: (1.0 if ln["availability"] is None else ln["availability"],
                                                     -(retransmission_rate(ln) or 0.0)))
    return {**{k: m[k] for k in ("accepted", "delivered", "lost", "pending", "duplicated", "expired")},
            "clean": not (m["lost"] or m["duplicated"]),
            "delivered_share": m["delivered"] / m["accepted"] if m["accepted"] else None,
            "latency_p50": m["latency"]["p50"], "latency_p99": m["latency"]["p99"],
            "availability": sum(known) / len(known) if known else None,
            "worst_line": worst and {k: worst[k] for k in ("line", "availability", "outages", "retransmissions",
                                                           "crc_failures", "timeouts")}
            | {"retransmission_rate": retransmission_rate(worst)}}


def line_rows(directions: list[dict]) -> list[dict]:
    """Per-line figures from the direction rows: traffic counted once (on the sending side),
    check failures and timeouts from both ends, availability of the worse end."""
    by_line: dict[str, list[dict]] = defaultdict(list)
    for r in directions:
        by_line[r["line"]].append(r)
    rows = []
    for name, rs in sorted(by_line.items()):
        tx = [r for r in rs if r["dir"] == "tx"]
        avail = [r["availability"] for r in tx if r["availability"] is not None]
        rows.append({
            "line": name, "proto": next((r["proto"] for r in rs if r["proto"]), None),
            "baud": next((r["baud"] for r in rs if r["baud"]), None),
            "hosts": sorted({r["host"] for r in rs}),
            "frames": sum(r["frames"] for r in tx), "bytes": sum(r["bytes"] for r in tx),
            "data_messages": sum(r["data_messages"] for r in tx),
            "retransmissions": sum(r["retransmissions"] for r in tx),
            "crc_failures": sum(r["crc_failures"] for r in rs),
            "timeouts": sum(r["timeouts"] for r in rs),
            "outages": max((r["downs"] for r in tx), default=0),
            "up_seconds": min((r["up_seconds"] for r in tx), default=0.0),
            "availability": min(avail) if avail else None,
        })
    return rows
