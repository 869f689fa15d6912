"""The summary.json contract of `mccs analyze` (version, field order) and the per-line roll-up.

Kept apart from the Spark job so the trace generator can state its known answers in exactly
the same shape without importing Spark.
"""
from __future__ import annotations

from collections import defaultdict

SCHEMA = "mccs-analyze-summary"
SCHEMA_VERSION = 1

DATA_KINDS = ("D", "ETB", "ETX")        # frames that carry a message image
REJECT_KINDS = ("N", "NAK")             # async reject, BSC negative acknowledgement
MSG_KINDS = ("accepted", "sent", "acked", "received", "delivered", "duplicate")
PERCENTILES = (0.5, 0.95, 0.99)
MINUTE = 60.0

# Column order of the CSV tables (and of the rows in summary.json).
DIRECTION_COLUMNS = ("line", "host", "peer", "dir", "proto", "baud", "frames", "bytes", "data_frames",
                     "data_messages", "retransmissions", "naks", "reject_rate", "crc_failures", "timeouts",
                     "retries", "downs", "up_seconds", "availability", "utilisation",
                     "utilisation_peak_minute")
LINE_COLUMNS = ("line", "proto", "baud", "frames", "bytes", "data_messages", "retransmissions",
                "crc_failures", "timeouts", "outages", "up_seconds", "availability")
HOST_COLUMNS = ("host", "accepted", "sent", "acked", "received", "delivered", "duplicates_dropped",
                "send_list_hwm", "recv_list_hwm")


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
