"""The Spark job behind `mccs analyze`: trace events in, the summary dict out.

One JSON parse (or Parquet scan) of the traces is cached and every figure comes from a few
aggregations over it, so the job runs the same on `local[*]` and on a cluster. Only small
results (per line, per minute, per host, up/down intervals, latency histogram) reach the
driver. Percentiles use Spark's exact `percentile` (linear interpolation between closest
ranks, as numpy's default), not an approximation. The session is made in `session`, the
traces are found and read in `traces`.
"""
from __future__ import annotations

import time

from mccs.analytics import AnalyzeError
from mccs.analytics.schema import (DATA_KINDS, MINUTE, MSG_KINDS, PERCENTILES, REJECT_KINDS, SCHEMA,
                                   SCHEMA_VERSION, line_rows)
from mccs.analytics.session import LOG4J, java_available, start_session
from mccs.analytics.traces import FIELDS, JSON_SUFFIXES, URL, compact, find_inputs, load_events, parse_time

# The session's and the traces' names stay importable from here, where callers have always found them.
__all__ = ["AnalyzeError", "LOG4J", "java_available", "start_session", "JSON_SUFFIXES", "URL", "FIELDS",
           "find_inputs", "load_events", "parse_time", "compact", "KIND_ORDER", "analyze"]

KIND_ORDER = {k: i for i, k in enumerate(MSG_KINDS)}      # breaks ties of equal timestamps


def analyze(spark, paths: list[str], since=None, until=None) -> dict:
    """The whole analysis: the summary dict (summary.json) plus the tables for the report
    under the private key `_tables`.

    The input is read twice: once for every count (`_one_pass`), once for the messages."""
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    since, until = parse_time(since), parse_time(until)
    events, read = load_events(spark, paths)
    in_window = ~F.col("bad")
    if since is not None:
        in_window &= F.col("ts") >= since
    if until is not None:
        in_window &= F.col("ts") < until
    sides, minutes, up_down = _one_pass(events, in_window)
    events_in = sum(r["n"] for r in sides if r["win"])
    if not events_in:
        raise AnalyzeError(f"no valid trace events in the window ({sum(r['n'] for r in sides)} lines read, "
                           f"{sum(r['n'] for r in sides if r['bad'])} malformed): check the paths and "
                           f"--since/--until")
    ws = since if since is not None else min(r["t_min"] for r in sides if r["win"])
    we = until if until is not None else max(r["t_max"] for r in sides if r["win"])
    counts: dict[tuple, dict] = {}
    for r in sides:             # rows apart only by up/down time or proto are one count here
        key = (r["type"], r["host"], r["line"], r["dir"], r["kind"])
        if r["win"] and key in counts:
            c = counts[key]
            c.update({k: c[k] + r[k] for k in ("n", "bytes", "retrans", "bad_frames", "data_messages")},
                     proto=max(filter(None, (c["proto"], r["proto"])), default=None))
        elif r["win"]:
            counts[key] = r
    up, baud = _up_intervals(up_down, ws, we)
    messages, hosts_hwm, histogram, problems = _messages(events.filter(in_window))
    directions = _directions(counts, minutes, up, baud, ws, we)
    summary = {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "engine": {"spark": spark.version, "master": spark.sparkContext.master,
                   "seconds": round(time.monotonic() - t0, 3)},
        "input": {"paths": [str(p) for p in paths], **read, "lines": sum(r["n"] for r in sides),
                  "events": events_in, "malformed": sum(r["n"] for r in sides if r["bad"]),
                  "since": since, "until": until,
                  "window": {"start": ws, "end": we, "seconds": we - ws}},
        "directions": directions,
        "lines": line_rows(directions),
        "messages": messages,
        "hosts": _hosts(counts, hosts_hwm),
    }
    summary["_tables"] = {"minutes": minutes, "up": up, "histogram": histogram, "problems": problems}
    return summary


def _one_pass(events, in_window) -> tuple[list[dict], list[dict], list[dict]]:
    """One scan, one aggregation over two grouping sets: figures per (malformed, in window, type,
    host, line, dir, kind, proto), with the few up/down events kept one by one (also those outside
    the window, which give the line state at its start); and frames per (host, line, dir, minute).
    Returns (sides, minutes, up/down events). Only fixed-width aggregates (no max of a string):
    those keep Spark on its hash aggregation instead of a sort."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    up_down = ~F.col("bad") & (F.col("type") == "line") & F.col("kind").isin("up", "down") & F.col("line").isNotNull()
    frame = in_window & (F.col("type") == "frame") & F.col("line").isNotNull() & F.col("dir").isNotNull()
    data_msg = (F.col("kind").isin(*DATA_KINDS) & F.col("origin").isNotNull() & F.col("msg_id").isNotNull()
                & F.coalesce(F.col("ok"), F.lit(True)) & ~F.coalesce(F.col("retransmit"), F.lit(False)))
    keys = events.select("*", in_window.alias("win"), F.when(up_down, F.col("ts")).alias("ud_ts"),
                         F.when(up_down, F.col("baud")).alias("ud_baud"),
                         F.when(frame, F.floor(F.col("ts") / MINUTE)).alias("minute"))
    side_keys = ("bad", "win", "type", "host", "line", "dir", "kind", "proto", "ud_ts", "ud_baud")
    minute_keys = ("host", "line", "dir", "minute")
    agg = (keys.groupingSets([side_keys, minute_keys], *dict.fromkeys(side_keys + minute_keys))
           .agg(F.grouping_id().alias("set"), F.count(F.lit(1)).alias("n"),
                F.sum(F.coalesce("bytes", F.lit(0))).alias("bytes"),
                F.count(F.when(F.col("retransmit"), 1)).alias("retrans"),
                F.count(F.when(F.col("ok") == F.lit(False), 1)).alias("bad_frames"),
                F.count(F.when(data_msg, 1)).alias("data_messages"),
                F.count(F.when(F.col("kind").isin(*DATA_KINDS), 1)).alias("data_frames"),
                F.min("ts").alias("t_min"), F.max("ts").alias("t_max"))
           .persist(StorageLevel.MEMORY_AND_DISK))
    try:                        # grouping_id sets a bit for each key left out: for sides only minute (last)
        sides = [r.asDict() for r in agg.filter(F.col("set") == 1).collect()]
        # minutes reach Python as a few rows of number arrays: a million Rows would take longer than the job
        columns = ("minute", "n", "bytes", "retrans", "data_frames")
        per_dir = (agg.filter((F.col("set") != 1) & F.col("minute").isNotNull()).groupBy("host", "line", "dir")
                   .agg(F.sort_array(F.collect_list(F.struct(*columns))).alias("m"))
                   .select("host", "line", "dir", *[F.col(f"m.{c}").alias(c) for c in columns]).collect())
    finally:
        agg.unpersist()
    minutes = [{"line": "-".join(sorted((r["host"], r["line"]))), "host": r["host"], "dir": r["dir"],
                "minute": int(m) * int(MINUTE), "frames": n, "bytes": b, "retransmissions": rt, "data_frames": d}
               for r in sorted(per_dir, key=lambda r: ("-".join(sorted((r["host"], r["line"]))), r["host"], r["dir"]))
               for m, n, b, rt, d in zip(*(r[c] for c in columns))]
    return sides, minutes, [r for r in sides if r["ud_ts"] is not None]


def _up_intervals(up_down: list[dict], ws: float, we: float) -> tuple[list[dict], dict]:
    """UP intervals per (host, line) clipped to [ws, we], from every up/down event up to we (those
    before the window give the state at its start; a first `down` means UP before it), and the
    latest baud of each line."""
    by_side: dict[tuple, list[dict]] = {}
    for e in sorted(up_down, key=lambda e: e["ud_ts"]):
        if e["ud_ts"] <= we:
            by_side.setdefault((e["host"], e["line"]), []).append(e)
    up, bauds = [], {}
    for (host, peer), events in sorted(by_side.items()):
        changes = [e for i, e in enumerate(events) if i == 0 or events[i - 1]["kind"] != e["kind"]]
        for i, e in enumerate(changes):
            if e["kind"] == "up":
                start, end = e["ud_ts"], changes[i + 1]["ud_ts"] if i + 1 < len(changes) else we
            elif i == 0:
                start, end = ws, e["ud_ts"]
            else:
                continue
            start, end = max(start, ws), min(end, we)
            if end > start:
                up.append({"line": "-".join(sorted((host, peer))), "host": host, "peer": peer,
                           "start": start, "end": end})
        with_baud = [e for e in events if e["ud_baud"] is not None]
        if with_baud:
            bauds[(host, peer)] = with_baud[-1]["ud_baud"]
    return sorted(up, key=lambda r: (r["line"], r["host"], r["start"])), bauds


def _directions(counts: dict, minutes: list[dict], up: list[dict], baud: dict, ws: float, we: float):
    span = we - ws
    sides = {(h, ln) for (t, h, ln, _, _) in counts if ln is not None and t in ("frame", "line")}
    sides |= {(u["host"], u["peer"]) for u in up}
    peak: dict[tuple, int] = {}
    for m in minutes:
        key = (m["host"], m["line"], m["dir"])
        peak[key] = max(peak.get(key, 0), m["bytes"])
    rows = []
    for host, peer in sorted(sides, key=lambda hp: ("-".join(sorted(hp)), hp[0])):
        name = "-".join(sorted((host, peer)))
        up_s = sum(u["end"] - u["start"] for u in up if u["host"] == host and u["peer"] == peer)
        line_ev = {k: v["n"] for (t, h, ln, _, k), v in counts.items() if t == "line" and (h, ln) == (host, peer)}
        b = baud.get((host, peer))
        for dir_ in ("rx", "tx"):
            frames = [v for (t, h, ln, d, _), v in counts.items()
                      if t == "frame" and (h, ln, d) == (host, peer, dir_)]
            other = "tx" if dir_ == "rx" else "rx"
            other_data = sum(v["n"] for (t, h, ln, d, k), v in counts.items()
                             if t == "frame" and (h, ln, d) == (host, peer, other) and k in DATA_KINDS)
            nbytes = sum(v["bytes"] for v in frames)
            naks = sum(v["n"] for v in frames if v["kind"] in REJECT_KINDS)
            cap = b / 10.0 if b else None
            pk = peak.get((host, name, dir_))
            rows.append({
                "line": name, "host": host, "peer": peer, "dir": dir_,
                "proto": max((v["proto"] for v in frames if v["proto"]), default=None) or _proto(counts, host, peer),
                "baud": b, "frames": sum(v["n"] for v in frames),
                "frames_by_kind": {v["kind"]: v["n"] for v in sorted(frames, key=lambda v: v["kind"] or "")},
                "bytes": nbytes, "data_frames": sum(v["n"] for v in frames if v["kind"] in DATA_KINDS),
                "data_messages": sum(v["data_messages"] for v in frames),
                "retransmissions": sum(v["retrans"] for v in frames), "naks": naks,
                "reject_rate": naks / other_data if other_data else None,
                "crc_failures": sum(v["bad_frames"] for v in frames),
                "timeouts": line_ev.get("timeout", 0) if dir_ == "tx" else 0,
                "retries": line_ev.get("retry", 0) if dir_ == "tx" else 0,
                "downs": line_ev.get("down", 0),
                "up_seconds": up_s, "availability": up_s / span if span > 0 else None,
                "utilisation": nbytes / cap / up_s if cap and up_s > 0 else None,
                "utilisation_peak_minute": pk / cap / MINUTE if cap and pk is not None else None,
            })
    return rows


def _proto(counts: dict, host: str, peer: str) -> str | None:
    return max((v["proto"] for (t, h, ln, _, _), v in counts.items() if (h, ln) == (host, peer) and v["proto"]),
               default=None)


def _messages(win):
    """Join msg events across hosts by (origin, msg_id), each `accepted` opening a new message
    of its key (MSG_IDs wrap), and derive latency, lost, pending, duplicated and list levels."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rank = F.create_map(*[x for k, i in KIND_ORDER.items() for x in (F.lit(k), F.lit(i))])
    msg = (win.filter((F.col("type") == "msg") & F.col("origin").isNotNull() & F.col("msg_id").isNotNull())
           .select("kind", "origin", "msg_id", "ts", _code(F.col("host")).alias("host"),
                   _code(F.substring("to_id", 1, 2)).alias("to_host"),
                   F.coalesce(rank[F.col("kind")], F.lit(99)).alias("rank")))
    order = (Window.partitionBy("origin", "msg_id").orderBy("ts", "rank")
             .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    msg = msg.withColumn("gen", F.count(F.when(F.col("kind") == "accepted", 1)).over(order))

    def at(kind, column):
        return F.min(F.when(F.col("kind") == kind, F.col(column)))

    def event(prefix, **more):
        """The time of a message's first event of a kind (and where), null when it has none."""
        ts = F.col(f"{prefix}_ts")
        return F.when(ts.isNotNull(), F.struct(ts.alias("ts"), *[_decode(F.col(c)).alias(k) for k, c in more.items()]))

    # Only numbers are aggregated (hosts as codes): that keeps Spark on a hash aggregation.
    # A message is received and delivered at one host, so the least host code is that host.
    per = (msg.groupBy("origin", "msg_id", "gen")
           .agg(at("accepted", "ts").alias("acc_ts"), at("accepted", "to_host").alias("acc_to"),
                at("acked", "ts").alias("ack_ts"), at("received", "ts").alias("recv_ts"),
                at("received", "host").alias("recv_host"), at("delivered", "ts").alias("deliv_ts"),
                at("delivered", "host").alias("deliv_host"),
                *[F.count(F.when(F.col("kind") == k, 1)).alias(a)
                  for k, a in (("received", "n_recv"), ("delivered", "n_deliv"), ("duplicate", "n_dup"))])
           .select("origin", "msg_id", "gen", "n_recv", "n_deliv", "n_dup", event("acc", to_host="acc_to").alias("acc"),
                   event("ack").alias("ack"), event("recv", host="recv_host").alias("recv"),
                   event("deliv", host="deliv_host").alias("deliv"))
           .withColumn("latency", F.col("deliv.ts") - F.col("acc.ts"))
           .persist(StorageLevel.MEMORY_AND_DISK))
    known = F.col("gen") > 0
    lost = known & (F.col("n_recv") == 0) & (F.col("n_deliv") == 0)
    pending = known & (F.col("n_recv") > 0) & (F.col("n_deliv") == 0)
    duplicated = known & (F.col("n_deliv") > 1)
    lat = F.when(known, F.col("latency"))
    pct = ", ".join(str(p) for p in PERCENTILES)
    s = per.agg(F.sum(known.cast("long")).alias("accepted"),
                F.sum((known & (F.col("n_deliv") > 0)).cast("long")).alias("delivered"),
                F.sum(lost.cast("long")).alias("lost"), F.sum(pending.cast("long")).alias("pending"),
                F.sum(duplicated.cast("long")).alias("duplicated"),
                F.sum("n_dup").alias("duplicate_arrivals"), F.sum((~known).cast("long")).alias("unmatched"),
                F.count(lat).alias("count"), F.avg(lat).alias("mean"), F.max(lat).alias("max"),
                F.expr(f"percentile(CASE WHEN gen > 0 THEN latency END, array({pct}))").alias("pct")).first()
    pcts = s["pct"] or [None] * len(PERCENTILES)
    messages = {k: s[k] or 0 for k in ("accepted", "delivered", "lost", "pending", "duplicated",
                                       "duplicate_arrivals", "unmatched")}
    messages["latency"] = {"count": s["count"], "mean": s["mean"],
                           **{f"p{round(p * 100)}": v for p, v in zip(PERCENTILES, pcts)}, "max": s["max"]}
    histogram = _histogram(per.filter(known & F.col("latency").isNotNull()))
    problems = [{"origin": r["origin"], "msg_id": r["msg_id"], "accepted": r["accepted"], "status": r["status"]}
                for r in per.filter(lost | pending | duplicated)
                .select("origin", "msg_id", F.col("acc.ts").alias("accepted"),
                        F.when(lost, "lost").when(pending, "pending").otherwise("duplicated").alias("status"))
                .orderBy("accepted").limit(100_000).collect()]
    hwm = _high_water(per)
    per.unpersist()
    return messages, hwm, histogram, problems


def _code(host):
    """A host id (a few ASCII characters) as a number, and back."""
    from pyspark.sql import functions as F
    return F.conv(F.hex(host), 16, 10).cast("long")


def _decode(code):
    from pyspark.sql import functions as F
    return F.unhex(F.conv(code, 10, 16)).cast("string")


def _histogram(lat) -> list[dict]:
    """Latency counts in tenths of a decade (log scale: latencies span ms to hours)."""
    from pyspark.sql import functions as F
    b = F.floor(F.log10(F.greatest(F.col("latency"), F.lit(1e-4))) * 10)
    rows = lat.groupBy(b.alias("b")).count().collect()
    return sorted(({"low": 10 ** (r["b"] / 10), "high": 10 ** ((r["b"] + 1) / 10), "count": r["count"]}
                   for r in rows), key=lambda r: r["low"])


def _high_water(per) -> dict:
    """Largest SEND_LIST (accepted for another host, not yet acked) and RECV_LIST (received,
    not yet delivered) per host, as far as the traces show them (counted from zero)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    remote = (F.col("gen") > 0) & (F.col("acc.to_host") != F.col("origin"))
    has_recv = F.col("recv").isNotNull()
    steps = [per.filter(remote).select(F.col("origin").alias("host"), F.lit("send").alias("list"),
                                       F.col("acc.ts").alias("ts"), F.lit(1).alias("d")),
             per.filter(remote & F.col("ack").isNotNull()).select(
                 F.col("origin").alias("host"), F.lit("send"), F.col("ack.ts"), F.lit(-1)),
             per.filter(has_recv).select(F.col("recv.host"), F.lit("recv"), F.col("recv.ts"), F.lit(1)),
             per.filter(has_recv & F.col("deliv").isNotNull()).select(
                 F.col("deliv.host"), F.lit("recv"), F.col("deliv.ts"), F.lit(-1))]
    all_steps = steps[0]
    for df in steps[1:]:
        all_steps = all_steps.union(df)
    order = (Window.partitionBy("host", "list").orderBy("ts", "d")
             .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    rows = (all_steps.withColumn("level", F.sum("d").over(order))
            .groupBy("host", "list").agg(F.max("level").alias("hwm")).collect())
    return {(r["host"], r["list"]): max(0, r["hwm"]) for r in rows}


def _hosts(counts: dict, hwm: dict) -> list[dict]:
    hosts = sorted({h for (t, h, *_rest) in counts if t == "msg"} | {h for h, _ in hwm})
    rows = []
    for h in hosts:
        n = {k: sum(v["n"] for (t, hh, _, _, kk), v in counts.items() if t == "msg" and hh == h and kk == k)
             for k in MSG_KINDS}
        rows.append({"host": h, "accepted": n["accepted"], "sent": n["sent"], "acked": n["acked"],
                     "received": n["received"], "delivered": n["delivered"],
                     "duplicates_dropped": n["duplicate"],
                     "send_list_hwm": hwm.get((h, "send"), 0), "recv_list_hwm": hwm.get((h, "recv"), 0)})
    return rows
