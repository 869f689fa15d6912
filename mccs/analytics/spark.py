"""The Spark job behind `mccs analyze`: trace events in, the summary dict out.

The traces are read twice, nothing of them cached (a second scan costs less than a cache of
the parsed events): for every count, and at the same time, on a thread of its own, for the
per-message table (Spark fills the cores either leaves idle); every figure comes from a few
aggregations, so the job runs the same on `local[*]` and on a cluster. Only small
results (per line, per minute, per host, up/down intervals, latency histogram) reach the
driver. Percentiles are exact, bit for bit what Spark's `percentile` gives (linear
interpolation between closest ranks, as numpy's default), found from approximate ones that
bracket them (`_percentiles`), not an approximation. The session is made in `session`, the
traces are found and read in `traces`. The figures of routed traffic (forwarded, lines crossed,
per-hop latency, expired, notices, paths) are documented in `schema`.
"""
from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import groupby
from operator import itemgetter

from mccs.analytics import AnalyzeError
from mccs.analytics.progress import QUIET, Progress
from mccs.analytics.schema import (ARRIVAL_KINDS, DATA_KINDS, EXPIRY_REASONS, MINUTE, MSG_KINDS, NOTICE_KINDS,
                                   REFUSAL_REASONS,
                                   PATH_SLOTS, PERCENTILES, REJECT_KINDS, SCHEMA, SCHEMA_VERSION, line_rows, time_bin,
                                   verdict)
from mccs.analytics.session import LOG4J, java_available, start_session
from mccs.analytics.traces import FIELDS, JSON_SUFFIXES, URL, compact, find_inputs, load_events, parse_time

# The session's and the traces' names stay importable from here, where callers have always found them.
__all__ = ["AnalyzeError", "LOG4J", "java_available", "start_session", "JSON_SUFFIXES", "URL", "FIELDS",
           "find_inputs", "load_events", "parse_time", "compact", "KIND_ORDER", "analyze"]

KIND_ORDER = {k: i for i, k in enumerate(MSG_KINDS)}      # breaks ties of equal timestamps


def analyze(spark, paths: list[str], since=None, until=None, progress: Progress = QUIET) -> dict:
    """The whole analysis: the summary dict (summary.json) plus the tables for the report
    under the private key `_tables`. `progress` is told each step.

    The input is read twice, at once: for every count (`_one_pass`) and for the per-message table
    (`_per_message`); a third time only for a window under SUBMINUTE_WINDOW known only after the
    first (`_frames_per_bin`)."""
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    since, until = parse_time(since), parse_time(until)
    events, read = load_events(spark, paths)
    in_window = ~F.col("bad")
    if since is not None:
        in_window &= F.col("ts") >= since
    if until is not None:
        in_window &= F.col("ts") < until
    progress.stage("counting frames, line and message events")
    # The per-message table is built meanwhile, on a thread of its own: Spark gives its tasks the
    # cores the first pass leaves idle (its last tasks, the driver's work on what it collects).
    pool = ThreadPoolExecutor(1, thread_name_prefix="mccs-messages")
    table = pool.submit(_per_message, events.filter(in_window))
    pool.shutdown(wait=False)
    try:
        sides, minutes, up_down, window, traffic = _one_pass(events, in_window, since, until)
        lines_read = sum(r["events"] for r in sides)
        events_in = sum(r["events"] for r in sides if r["win"])
        malformed = sum(r["events"] for r in sides if r["bad"])
        progress.stage(f"{lines_read:,} events read, {events_in:,} in the window, {malformed:,} malformed")
        if window is None:
            raise AnalyzeError(f"no valid trace events in the window ({lines_read} lines read, "
                               f"{malformed} malformed): check the paths and --since/--until")
        ws, we, width = window
        counts: dict[tuple, dict] = {}
        for r in sides:             # rows apart only by up/down time or proto are one count here
            key = (r["type"], r["host"], r["line"], r["dir"], r["kind"])
            if r["win"] and key in counts:
                c = counts[key]
                c.update({k: c[k] + r[k] for k in ("n", "events", "bytes", "retrans", "bad_frames", "data_messages")},
                         proto=max(filter(None, (c["proto"], r["proto"])), default=None))
            elif r["win"]:
                counts[key] = r
        up, baud = _up_intervals(up_down, ws, we)
        accepted = sum(v["n"] for (t, _, _, _, k), v in counts.items() if t == "msg" and k == "accepted")
        progress.stage(f"joining the {accepted:,} messages across hosts")
        messages, routing, hosts_hwm, histogram, problems, latency_bins = _messages(table.result(), accepted,
                                                                                        width)
        routing["route_changes"] = sum(v["n"] for (t, _, _, _, k), v in counts.items() if t == "line" and k == "route")
        messages["refused"] = sum(v["n"] for (t, _, _, _, k), v in counts.items() if t == "msg" and k == "refused")
        messages["refused_by_reason"] = _refusals(events, in_window) if messages["refused"] else {}
        directions = _directions(counts, minutes, up, baud, ws, we)
        if traffic is None:
            progress.stage(f"counting frames per {width} s")
            traffic = _frames_per_bin(events, in_window, width)
        summary = {
            "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "engine": {"spark": spark.version, "master": spark.sparkContext.master,
                       "seconds": round(time.monotonic() - t0, 3)},
            "input": {"paths": [str(p) for p in paths], **read, "lines": lines_read,
                      "events": events_in, "malformed": malformed,
                      "since": since, "until": until,
                      "window": {"start": ws, "end": we, "seconds": we - ws}},
            "directions": directions,
            "lines": line_rows(directions),
            "messages": messages,
            "hosts": _hosts(counts, hosts_hwm),
            "routing": routing,
            "calls": _calls(events, in_window, counts, baud) if any(k[0] == "call" for k in counts) else [],
            "time_bin_seconds": width,
        }
        summary["verdict"] = verdict(summary)
        summary["_tables"] = {"minutes": minutes, "up": up, "histogram": histogram, "problems": problems,
                              "hops": routing["hops"], "traffic": traffic, "latency": latency_bins}
        return summary
    finally:
        _drop(table)


def _refusals(events, in_window) -> dict[str, int]:
    """Refused arrivals by reason (the code an end-to-end refusal traces; a refused segment's reason
    is a sentence): one more scan, made only when the first pass counted some."""
    from pyspark.sql import functions as F
    rows = (events.filter(in_window & (F.col("type") == "msg") & (F.col("kind") == "refused"))
            .groupBy("reason").count().collect())
    out: collections.Counter = collections.Counter()
    for r in rows:
        out[r["reason"] if r["reason"] in REFUSAL_REASONS else "other"] += r["count"]
    return dict(out)


def _calls(events, in_window, counts: dict, bauds: dict) -> list[dict]:
    """Per host and line that is a call (docs/CALLS.md): calls made and answered, those connected,
    the failed ones by result, seconds connected, and the share of them the line spent carrying
    message frames (both ways, at the line's baud). One more scan, of the few call events, made
    only when the first pass counted some."""
    from pyspark.sql import functions as F
    rows = (events.filter(in_window & (F.col("type") == "call"))
            .groupBy("host", "line", "kind", "result")
            .agg(F.count(F.lit(1)).alias("n"), F.sum("duration").alias("seconds")).collect())
    out: dict[tuple, dict] = {}
    for r in rows:
        side = out.setdefault((r["host"], r["line"]), {"host": r["host"], "line": r["line"], "dialled": 0,
                                                      "answered": 0, "connected": 0, "failed": {},
                                                      "connected_seconds": 0.0})
        if r["kind"] in ("dial", "answer", "connect"):
            side[{"dial": "dialled", "answer": "answered", "connect": "connected"}[r["kind"]]] += r["n"]
        elif r["kind"] == "result":
            side["failed"][r["result"] or "other"] = side["failed"].get(r["result"] or "other", 0) + r["n"]
        elif r["kind"] == "hangup":
            side["connected_seconds"] += r["seconds"] or 0.0
    for (host, line), side in out.items():
        data = sum(v["bytes"] for (t, h, ln, _, k), v in counts.items()
                   if t == "frame" and h == host and ln == line and k in DATA_KINDS)
        baud, seconds = bauds.get((host, line)), side["connected_seconds"]
        side["connected_seconds"] = round(seconds, 3)
        side["data_share"] = round(min(1.0, data / (2 * seconds * baud / 10)), 4) if baud and seconds else None
    return sorted(out.values(), key=lambda s: (s["line"], s["host"]))


def _frames():
    """The frames an event stands for: a run of damaged ones in a row is traced as one event with
    their number in `frames` (noise on a line can make thousands a second); any other, one."""
    from pyspark.sql import functions as F
    return F.coalesce(F.col("frames"), F.lit(1))


def _frame_counts() -> list:
    """What is counted of the frames per minute or bin (and of every group of the first pass)."""
    from pyspark.sql import functions as F
    return [F.sum(_frames()).alias("n"), F.sum(F.coalesce("bytes", F.lit(0))).alias("bytes"),
            F.count(F.when(F.col("retransmit"), 1)).alias("retrans"),
            F.count(F.when(F.col("kind").isin(*DATA_KINDS), 1)).alias("data_frames")]


def _one_pass(events, in_window, since: float | None, until: float | None):
    """One scan, one aggregation over grouping sets: figures per (malformed, in window, type, host,
    line, dir, kind, proto), with the few up/down events kept one by one (also those outside the
    window, which give the line state at its start); frames per (host, line, dir, minute); and
    per bin under a minute when --since and --until make a window short enough for that.
    Returns (sides, minutes, up/down events, window, traffic): the window as (start, end, bin
    width), None without events in it; traffic the frames per bin of that width (the minutes
    summed on the driver), or None for bins under a minute not counted here (a window known only now).
    Only fixed-width aggregates (no max of a string): those keep Spark on its hash aggregation
    instead of a sort."""
    from pyspark.sql import functions as F
    up_down = ~F.col("bad") & (F.col("type") == "line") & F.col("kind").isin("up", "down") & F.col("line").isNotNull()
    frame = in_window & (F.col("type") == "frame") & F.col("line").isNotNull() & F.col("dir").isNotNull()
    data_msg = (F.col("kind").isin(*DATA_KINDS) & F.col("origin").isNotNull() & F.col("msg_id").isNotNull()
                & F.coalesce(F.col("ok"), F.lit(True)) & ~F.coalesce(F.col("retransmit"), F.lit(False)))
    known = time_bin(until - since) if since is not None and until is not None else MINUTE
    bins = {"minute": MINUTE} | ({"tick": known} if known < MINUTE else {})
    keys = events.select("*", in_window.alias("win"), F.when(up_down, F.col("ts")).alias("ud_ts"),
                         F.when(up_down, F.col("baud")).alias("ud_baud"),
                         *[F.when(frame, F.floor(F.col("ts") / w)).alias(k) for k, w in bins.items()])
    side_keys = ("bad", "win", "type", "host", "line", "dir", "kind", "proto", "ud_ts", "ud_baud")
    sets = [side_keys] + [("host", "line", "dir", k) for k in bins]
    agg = (keys.groupingSets(sets, *dict.fromkeys(side_keys + tuple(bins)))
           .agg(*[F.grouping(k).alias(f"g_{k}") for k in bins], *_frame_counts(),
                F.count(F.lit(1)).alias("events"),
                F.sum(F.when(F.col("ok") == F.lit(False), _frames()).otherwise(0)).alias("bad_frames"),
                F.count(F.when(data_msg, 1)).alias("data_messages"),
                F.min("ts").alias("t_min"), F.max("ts").alias("t_max")))
    # One action for both kinds of group (a cached aggregation read twice cost more): grouping(k)
    # is 1 in the rows of a set without k, so a side (all 1) is a group of its own below, and the
    # bins of a set are packed per line end and direction.
    flags = [f"g_{k}" for k in bins]
    bin_ = F.coalesce(*[F.col(k) for k in bins]).alias("bin")
    side = sum(F.col(g) for g in flags) == len(bins)
    sides: list[dict] = []
    per: dict[str, list] = {k: [] for k in bins}
    for r in _per_dir(agg.filter(side | bin_.isNotNull()).select("*", bin_), "bin", (*flags, *side_keys), SIDE_COLUMNS):
        if all(r[g] for g in flags):
            sides.append({k: r[k] for k in (*side_keys, *SIDE_COLUMNS)} | {c: r[c][0] for c in BIN_COLUMNS})
        else:
            per[next(k for k in bins if not r[f"g_{k}"])].append(r)
    minutes = _rows(per["minute"], MINUTE, label="minute")
    win = [r for r in sides if r["win"]]
    window = None
    traffic: list[dict] | None = []
    if win:
        ws = since if since is not None else min(r["t_min"] for r in win)
        we = until if until is not None else max(r["t_max"] for r in win)
        window = (ws, we, time_bin(we - ws))
        width = window[2]
        traffic = (_rows(per["minute"], MINUTE, width) if width >= MINUTE
                   else _rows(per["tick"], width) if "tick" in per else None)
    return sides, minutes, [r for r in sides if r["ud_ts"] is not None], window, traffic


BIN_COLUMNS = ("n", "bytes", "retrans", "data_frames")
SIDE_COLUMNS = ("events", "bad_frames", "data_messages", "t_min", "t_max")   # counted per side only


def _per_dir(counts, key: str, by=("host", "line", "dir"), single=()) -> list:
    """Frame counts per (host, line, dir, `key`: a bin number) as one Row of arrays per line end
    and direction (bins in order): a million Rows would take longer than the job. Columns
    `single` are taken as they are, for groups of one row."""
    from pyspark.sql import functions as F
    return (counts.groupBy(*by)
            .agg(F.sort_array(F.collect_list(F.struct(key, *BIN_COLUMNS))).alias("m"),
                 *[F.max(c).alias(c) for c in single])
            .select(*by, *single, F.col(f"m.{key}").alias("bin"), *[F.col(f"m.{c}").alias(c) for c in BIN_COLUMNS])
            .collect())


def _rows(per_dir: list, width: float, into: float | None = None, label: str = "start") -> list[dict]:
    """The rows of _per_dir's arrays (bins of `width` seconds), ordered by line, host, dir and time,
    with `label` the bin's start (epoch seconds); summed into bins of `into` seconds when given
    (a multiple of `width`), on the arrays, which is quick even for a million minutes."""
    step, into = int(width), int(into or width)
    out = []
    for r in sorted(per_dir, key=lambda r: ("-".join(sorted((r["host"], r["line"]))), r["host"], r["dir"])):
        line, host, dir_ = "-".join(sorted((r["host"], r["line"]))), r["host"], r["dir"]
        bins: Iterable[tuple[int, Sequence[int]]] = zip((b * step // into * into for b in r["bin"]),
                                                        zip(*(r[c] for c in BIN_COLUMNS)))
        if into != step:        # the bins are in order, so those of one start are consecutive
            bins = ((start, [sum(c) for c in zip(*(counts for _, counts in group))])
                    for start, group in groupby(bins, key=itemgetter(0)))
        out += [{"line": line, "host": host, "dir": dir_, label: start, "frames": n, "bytes": nbytes,
                 "retransmissions": rt, "data_frames": d} for start, (n, nbytes, rt, d) in bins]
    return out


def _frames_per_bin(events, in_window, width: int) -> list[dict]:
    """Frames per bin under a minute for a window known only after the first pass: counted again,
    which only a window under SUBMINUTE_WINDOW (a small input) pays."""
    from pyspark.sql import functions as F
    frame = in_window & (F.col("type") == "frame") & F.col("line").isNotNull() & F.col("dir").isNotNull()
    counts = (events.filter(frame).groupBy("host", "line", "dir", F.floor(F.col("ts") / width).alias("tick"))
              .agg(*_frame_counts()))
    return _rows(_per_dir(counts, "tick"), width)


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
    for key, group in groupby(minutes, key=itemgetter("host", "line", "dir")):     # in order of line end
        peak[key] = max(peak.get(key, 0), *map(itemgetter("bytes"), group))
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


def _per_message(win):
    """The msg events joined across hosts by (origin, msg_id), each `accepted` opening a new
    message of its key (MSG_IDs wrap): a row a message, cached (built by one action here)."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def codes(names, column):
        """1, 2, ... for the names in order, len(names) + 1 for any other value or none."""
        m = F.create_map(*[x for i, k in enumerate(names) for x in (F.lit(k), F.lit(i + 1))])
        return F.coalesce(m[F.col(column)], F.lit(len(names) + 1))

    kind = F.col("kind")
    rank = F.create_map(*[x for k, i in KIND_ORDER.items() for x in (F.lit(k), F.lit(i))])
    # Lines crossed to the destination: `received` carries hops on a routed arrival; without it the
    # message came over one version-1 line, or none when it was sent to a process of its origin.
    crossed = F.coalesce(F.col("hops"), F.when(F.col("host") == F.col("origin"), 0).otherwise(1))
    msg = (win.filter((F.col("type") == "msg") & F.col("origin").isNotNull() & F.col("msg_id").isNotNull())
           .select("kind", "origin", "msg_id", "ts", _code(F.col("host")).alias("host"),
                   _code(F.substring("to_id", 1, 2)).alias("to_host"),
                   F.coalesce(rank[kind], F.lit(99)).alias("rank"),
                   F.when(kind == "received", crossed).alias("crossed"),
                   F.when(kind == "expired", codes(EXPIRY_REASONS, "reason")).alias("reason"),
                   F.when((kind == "accepted") & F.col("notice").isNotNull(), codes(NOTICE_KINDS, "notice"))
                   .alias("notice")))
    order = (Window.partitionBy("origin", "msg_id").orderBy("ts", "rank")
             .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    arrival = kind.isin(*ARRIVAL_KINDS)
    # One window, the sort the key needs anyway: `gen` numbers the messages of a key, `n_arr` the
    # arrivals at a host of all of them in time order (a message's `accepted` is its first).
    msg = msg.select("*", F.count(F.when(kind == "accepted", 1)).over(order).alias("gen"),
                     F.when(arrival, F.count(F.when(arrival, 1)).over(order)).alias("n_arr"))

    def at(kind, column):
        return F.min(F.when(F.col("kind") == kind, F.col(column)))

    # Only numbers are aggregated (hosts as codes): that keeps Spark on a hash aggregation.
    # A message is received and delivered at one host, so the least host code is that host.
    # Its path: arrival n_arr (from the first, `first_arr`) goes to slot n_arr % PATH_SLOTS as
    # n_arr << 32 | host; the least of a slot is then the earliest, so the slots hold the first
    # PATH_SLOTS arrivals in turn (_path puts them in order), with no second window over the events.
    slots = [f"p{j}" for j in range(PATH_SLOTS)]
    # host ids are 2 characters (4 fit in 32 bits); a longer one shows as "?" in a path
    msg = msg.withColumn("host32", F.when(F.col("host") < 2 ** 32, F.col("host")).otherwise(ord("?")))
    per = (msg.groupBy("origin", "msg_id", "gen")
           .agg(at("accepted", "ts").alias("acc_ts"), at("accepted", "to_host").alias("acc_to"),
                at("acked", "ts").alias("ack_ts"), at("received", "ts").alias("recv_ts"),
                at("received", "host").alias("recv_host"), at("delivered", "ts").alias("deliv_ts"),
                at("delivered", "host").alias("deliv_host"),
                *[F.count(F.when(F.col("kind") == k, 1)).alias(a)
                  for k, a in (("received", "n_recv"), ("delivered", "n_deliv"), ("duplicate", "n_dup"),
                               ("forwarded", "n_fwd"), ("expired", "n_exp"))],
                F.min("crossed").alias("hops"), F.min("reason").alias("reason"), F.min("notice").alias("notice"),
                F.min("n_arr").alias("first_arr"), F.max("n_arr").alias("last_arr"),
                *[F.min(F.when(F.col("n_arr") % PATH_SLOTS == j, F.shiftleft(F.col("n_arr"), 32) + F.col("host32")))
                  .alias(c) for j, c in enumerate(slots)])
           .select("origin", "msg_id", "gen", "n_recv", "n_deliv", "n_dup", "acc_ts", _decode("acc_to").alias("acc_to"),
                   "ack_ts", "recv_ts", _decode("recv_host").alias("recv_host"), "deliv_ts",
                   _decode("deliv_host").alias("deliv_host"), "n_fwd", "n_exp", "hops", "reason", "notice",
                   "first_arr", "last_arr", *slots)
           .withColumn("latency", F.col("deliv_ts") - F.col("acc_ts"))
           .persist(StorageLevel.MEMORY_AND_DISK))
    per.count()
    return per


def _drop(table: Future) -> None:
    """Free the per-message table's cache once it is built (also when the analysis failed before)."""
    with contextlib.suppress(Exception):
        table.result().unpersist()


def _messages(per, accepted: int = 0, width: float = MINUTE):
    """Latency, lost, pending, duplicated, expired, the routing figures, each message's path, list
    levels and latency per bin of `width` seconds, from the per-message table. `accepted` (the
    count of `accepted` events) chooses how percentiles are found (see _percentiles)."""
    from pyspark.sql import functions as F
    slots = [f"p{j}" for j in range(PATH_SLOTS)]
    known = F.col("gen") > 0
    # An expired message (hop limit, ttl) was removed on purpose and its sender told: not lost,
    # not pending (what goes on as a void is never received). Notices are messages like others.
    expired = known & (F.col("n_exp") > 0) & (F.col("n_deliv") == 0)
    lost = known & (F.col("n_recv") == 0) & (F.col("n_deliv") == 0) & (F.col("n_exp") == 0)
    pending = known & (F.col("n_recv") > 0) & (F.col("n_deliv") == 0) & (F.col("n_exp") == 0)
    duplicated = known & (F.col("n_deliv") > 1)
    notice = known & F.col("notice").isNotNull()
    to_recv = F.when(known, F.col("recv_ts") - F.col("acc_ts"))
    per_hop = F.when(F.col("hops") > 0, to_recv / F.col("hops"))

    def n(cond):
        return F.sum(cond.cast("long"))

    exact = accepted <= EXACT_UP_TO

    def stats(name):
        """count, mean and max of a column, and its percentiles (few messages) or their brackets."""
        pct = ", ".join(str(p) for p in PERCENTILES)
        return [F.count(name).alias(f"{name}_count"), F.avg(name).alias(f"{name}_mean"),
                F.max(name).alias(f"{name}_max"),
                F.expr(f"percentile({name}, array({pct}))").alias(f"{name}_pct") if exact else _brackets(name)]

    timed = ("lat", "to_recv", "per_hop")
    per_t = per.select("*", F.when(known, F.col("latency")).alias("lat"), to_recv.alias("to_recv"),
                       per_hop.alias("per_hop"))
    s = (per_t
         .agg(n(known).alias("accepted"), n(known & (F.col("n_deliv") > 0)).alias("delivered"),
              n(lost).alias("lost"), n(pending).alias("pending"), n(duplicated).alias("duplicated"),
              F.sum("n_dup").alias("duplicate_arrivals"), n(~known).alias("unmatched"),
              n(expired).alias("expired"), F.sum("n_fwd").alias("forwarded_events"),
              n(known & (F.col("n_fwd") > 0)).alias("forwarded_messages"),
              *[n(expired & (F.col("reason") == i + 1)).alias(f"reason{i + 1}")
                for i in range(len(EXPIRY_REASONS) + 1)],
              n(notice).alias("notices"), n(notice & (F.col("n_deliv") > 0)).alias("notices_delivered"),
              n(notice & lost).alias("notices_lost"),
              *[n(notice & (F.col("notice") == i + 1)).alias(f"notice{i + 1}")
                for i in range(len(NOTICE_KINDS) + 1)],
              *[a for name in timed for a in stats(name)])
         .first())
    pcts = ({name: s[f"{name}_pct"] or [None] * len(PERCENTILES) for name in timed} if exact
            else _percentiles(per_t, s, timed))

    def figures(name):
        return {"count": s[f"{name}_count"], "mean": s[f"{name}_mean"],
                **{f"p{round(p * 100)}": v for p, v in zip(PERCENTILES, pcts[name])}, "max": s[f"{name}_max"]}

    def by_code(names, prefix):
        """Counts by name; "other" only when there is one."""
        out = {k: s[f"{prefix}{i + 1}"] or 0 for i, k in enumerate(names)}
        other = s[f"{prefix}{len(names) + 1}"] or 0
        return out | ({"other": other} if other else {})

    messages = {k: s[k] or 0 for k in ("accepted", "delivered", "lost", "pending", "duplicated",
                                       "duplicate_arrivals", "unmatched")}
    messages["latency"] = figures("lat")
    messages["expired"] = s["expired"] or 0
    messages["expired_by_reason"] = by_code(EXPIRY_REASONS, "reason")
    messages["latency_received"] = figures("to_recv")
    messages["notices"] = {"accepted": s["notices"] or 0, "delivered": s["notices_delivered"] or 0,
                           "lost": s["notices_lost"] or 0, "by_kind": by_code(NOTICE_KINDS, "notice")}
    delivered = per.filter(known & F.col("latency").isNotNull())
    histogram, hops, latency_bins = _histogram(delivered, width)
    routing = {"forwarded_events": s["forwarded_events"] or 0, "forwarded_messages": s["forwarded_messages"] or 0,
               "hops": hops, "hops_mean": (sum(r["hops"] * r["messages"] for r in hops)
                                           / sum(r["messages"] for r in hops)) if hops else None,
               "hops_max": max((r["hops"] for r in hops), default=None),
               "latency_per_hop": figures("per_hop")}
    problems = [{"origin": r["origin"], "msg_id": r["msg_id"], "accepted": r["accepted"], "status": r["status"],
                 "path": _path([r[c] for c in slots], r["first_arr"], r["last_arr"])}
                for r in per.filter(lost | pending | duplicated | expired)
                .select("origin", "msg_id", F.col("acc_ts").alias("accepted"),
                        F.when(lost, "lost").when(pending, "pending").when(expired, "expired")
                        .otherwise("duplicated").alias("status"),
                        "first_arr", "last_arr", *slots)
                .orderBy("accepted").limit(100_000).collect()]
    hwm = _high_water(per, width)
    return messages, routing, hwm, histogram, problems, latency_bins


ACCURACY = 1000            # of the approximate percentiles that bracket the exact ones
EXACT_UP_TO = 200_000      # messages up to which Spark's `percentile` is cheaper than brackets


def _brackets(name: str):
    """For each of PERCENTILES p, approximate percentiles at p -+ 2/ACCURACY: values of the column
    whose ranks are below and above p's (Spark's approximation is within 1/ACCURACY of the rank)."""
    from pyspark.sql import functions as F
    around = [x for p in PERCENTILES for x in (max(0.0, p - 2 / ACCURACY), min(1.0, p + 2 / ACCURACY))]
    return F.percentile_approx(name, around, ACCURACY).alias(f"{name}_around")


def _percentiles(df, s, names, strict: bool = False) -> dict[str, list]:
    """The exact PERCENTILES of each named column of `df` (what Spark's `percentile` gives, to the
    bit), from `s`'s `_count` and `_around` (see _brackets) and one aggregation that counts the
    values below each bracket and collects those inside it, a few per thousand. Spark's exact
    `percentile` keeps every distinct value in a hash map: 2-3 s per column at 740,000 messages
    (10M events), 0.1 s at 74,000, less than this second action: `_messages` uses it up to
    EXACT_UP_TO messages. A bracket that does not hold the ranks it should (never seen) falls
    back to it (`strict`: raises instead)."""
    import math

    from pyspark.sql import functions as F
    aggs = []
    for name in names:
        around = s[f"{name}_around"] if s[f"{name}_count"] else []
        for i in range(len(around) // 2):
            lo, hi, c = F.lit(around[2 * i]), F.lit(around[2 * i + 1]), F.col(name)
            aggs += [F.count(F.when(c < lo, 1)).alias(f"{name}_{i}_below"),
                     F.collect_list(F.when((c >= lo) & (c <= hi), c)).alias(f"{name}_{i}_in")]
    row = df.agg(*aggs).first() if aggs else None
    out = {}
    for name in names:
        n = s[f"{name}_count"]
        values: list = []
        for i, p in enumerate(PERCENTILES):
            if not n:
                values.append(None)
                continue
            assert row is not None  # a column with values has brackets, so there were aggs
            below, inside = row[f"{name}_{i}_below"], sorted(row[f"{name}_{i}_in"])
            pos = (n - 1) * p
            lo, hi = math.floor(pos), math.ceil(pos)
            if not below <= lo <= hi < below + len(inside):
                if strict:
                    raise AssertionError(f"{name}: ranks {lo}..{hi} not in the bracket {below}..{below + len(inside)}")
                pct = ", ".join(str(p) for p in PERCENTILES)  # the bracket missed: Spark's exact percentiles
                values = df.agg(F.expr(f"percentile({name}, array({pct}))")).first()[0]
                break
            a, b = inside[lo - below], inside[hi - below]
            values.append(a if lo == hi or a == b else a + (pos - lo) * (b - a))    # Spark's formula
        out[name] = values
    return out


def _path(slots: list[int | None], first: int | None, last: int | None) -> str:
    """The hosts a message was at, in time order, a host once for each stay: "AA>BB>CC"; one that
    arrived at more than PATH_SLOTS hosts (a routing loop) ends with ">...". `slots`: arrival
    number << 32 | host code, arrival n in slot n % PATH_SLOTS (see _messages)."""
    seen: list[str] = []
    if first is None or last is None:  # both or neither: the min and max of one column
        return ""
    for n in range(first, min(last, first + len(slots) - 1) + 1):
        v = slots[n % len(slots)]
        if v is None or v >> 32 != n:
            break
        code = format(v & 0xFFFFFFFF, "x")
        host = bytes.fromhex(code.zfill(len(code) + len(code) % 2)).decode("ascii", "replace")
        if not seen or seen[-1] != host:
            seen.append(host)
    return ">".join(seen + ["..."] * (last - first >= len(slots)))


def _code(host):
    """A host id (a few ASCII characters) as a number, and back."""
    from pyspark.sql import functions as F
    return F.conv(F.hex(host), 16, 10).cast("long")


def _decode(code):
    from pyspark.sql import functions as F
    return F.unhex(F.conv(code, 10, 16)).cast("string")


def _histogram(lat, width: float) -> tuple[list[dict], list[dict], list[dict]]:
    """Latency counts in tenths of a decade (log scale: latencies span ms to hours), the same
    messages counted by the lines they crossed, and per bin of `width` seconds (by acceptance)
    the messages and their latency's p50 and p99 for the report's plot (Spark's approximate
    percentile, within 1/ACCURACY of the rank): one aggregation for the three."""
    from pyspark.sql import functions as F
    keys = lat.select("latency", "hops", F.floor(F.log10(F.greatest(F.col("latency"), F.lit(1e-4))) * 10).alias("b"),
                      F.floor(F.col("acc_ts") / width).alias("bin"))
    rows = (keys.groupingSets([("b", "hops"), ("bin",)], "b", "hops", "bin")
            .agg(F.grouping("bin").alias("g_bin"), F.count(F.lit(1)).alias("count"),
                 F.percentile_approx("latency", [0.5, 0.99], ACCURACY).alias("pct")).collect())
    buckets: dict[int, int] = {}
    hops: dict[int, int] = {}
    bins = []
    for r in rows:
        if r["g_bin"] == 0:
            bins.append({"start": r["bin"] * width, "messages": r["count"], "p50": r["pct"][0], "p99": r["pct"][1]})
            continue
        buckets[r["b"]] = buckets.get(r["b"], 0) + r["count"]
        if r["hops"] is not None:
            hops[r["hops"]] = hops.get(r["hops"], 0) + r["count"]
    return ([{"low": 10 ** (k / 10), "high": 10 ** ((k + 1) / 10), "count": v} for k, v in sorted(buckets.items())],
            [{"hops": k, "messages": v} for k, v in sorted(hops.items())], sorted(bins, key=lambda b: b["start"]))


def _high_water(per, width: float) -> dict:
    """Largest SEND_LIST (accepted for another host, not yet acked) and RECV_LIST (received,
    not yet delivered) per host, as far as the traces show them (counted from zero).

    The running level is summed per bin of `width` seconds (its change over the bin and its
    highest point inside), and the bins are chained here: the same figure as one running sum
    over all of a host's events, without a window partition of millions of rows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    remote = (F.col("gen") > 0) & (F.col("acc_to") != F.col("origin"))
    received = F.col("recv_ts").isNotNull()
    # a message's steps up (+1) and down (-1) of the lists, as rows; a step it did not take has no time
    moves = [(F.col("origin"), "send", F.when(remote, F.col("acc_ts")), 1),
             (F.col("origin"), "send", F.when(remote, F.col("ack_ts")), -1),
             (F.col("recv_host"), "recv", F.col("recv_ts"), 1),
             (F.col("deliv_host"), "recv", F.when(received, F.col("deliv_ts")), -1)]
    steps = F.array(*[F.struct(host.alias("host"), F.lit(name).alias("list"), ts.alias("ts"), F.lit(d).alias("d"))
                      for host, name, ts, d in moves])
    bin_ = ("host", "list", "bin")
    order = (Window.partitionBy(*bin_).orderBy("ts", "d").rowsBetween(Window.unboundedPreceding, Window.currentRow))
    rows = (per.select(F.inline(steps)).filter(F.col("ts").isNotNull())
            .withColumn("bin", F.floor(F.col("ts") / width))
            .withColumn("level", F.sum("d").over(order))
            .groupBy(*bin_).agg(F.sum("d").alias("change"), F.max("level").alias("peak")).collect())
    hwm: dict[tuple[str, str], int] = {}    # (host, list) -> the highest level
    level: dict[tuple[str, str], int] = {}  # (host, list) -> the level at the end of the bins so far
    for r in sorted(rows, key=lambda r: r["bin"]):
        key = (r["host"], r["list"])
        hwm[key] = max(hwm.get(key, 0), level.get(key, 0) + r["peak"])
        level[key] = level.get(key, 0) + r["change"]
    return hwm


def _hosts(counts: dict, hwm: dict) -> list[dict]:
    hosts = sorted({h for (t, h, *_rest) in counts if t == "msg"} | {h for h, _ in hwm})
    rows = []
    for h in hosts:
        n = {k: sum(v["n"] for (t, hh, _, _, kk), v in counts.items() if t == "msg" and hh == h and kk == k)
             for k in MSG_KINDS}
        rows.append({"host": h, "accepted": n["accepted"], "sent": n["sent"], "acked": n["acked"],
                     "received": n["received"], "delivered": n["delivered"],
                     "duplicates_dropped": n["duplicate"],
                     "send_list_hwm": hwm.get((h, "send"), 0), "recv_list_hwm": hwm.get((h, "recv"), 0),
                     "forwarded": n["forwarded"], "expired": n["expired"]})
    return rows
