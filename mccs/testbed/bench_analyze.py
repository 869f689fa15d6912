"""`mccs bench analyze`: events per second of the `mccs analyze` Spark job over generated
traces, read from JSON Lines and from the Parquet that `--compact` writes, on a session that is
already running (its start time is reported apart). Inputs are generated once under --dir and
reused by later runs, since generating ten million events takes minutes.

Its ceiling is measured in the same session on the same files: a bare scan (`count()` with the
schema given, which Spark answers without parsing the records' fields) and a full scan (every
column parsed and hashed, the least any analysis of every field must do). The analysis is
printed as a fraction of each (issue 15).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

EVENTS_PER_MESSAGE = 13.5       # what tracegen writes per message with the spec below, keep-alives included
SECONDS_PER_MESSAGE = 2.2       # traffic density: ~0.45 messages/s over 12 lines


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=int, nargs="+", default=[1_000_000, 10_000_000],
                   help="sizes of the inputs (approximate: tracegen writes whole messages)")
    p.add_argument("--runs", type=int, default=3, help="runs per input and form; the median is reported")
    p.add_argument("--master", default="local[2]", help="Spark master")
    p.add_argument("--dir", default="/tmp/mccs-bench-analyze", help="generated inputs are kept (and reused) here")


def dataset(root: Path, events: int) -> tuple[Path, int]:
    """JSON Lines of about `events` events under root/events-N/json (generated unless there), and
    the exact count."""
    from mccs.testbed.tracegen import generate
    done = root / f"events-{events}" / "generated.json"
    if not done.exists():
        messages = round(events / EVENTS_PER_MESSAGE)
        t0 = time.monotonic()
        answers = generate(done.parent / "json", hosts=8, lines=12, messages=messages,
                           duration=messages * SECONDS_PER_MESSAGE, outages=20, rotate_events=1_000_000,
                           compress_rotated=False)
        done.write_text(json.dumps({"events": answers["input"]["events"], "seconds": time.monotonic() - t0}))
        print(f"generated {answers['input']['events']} events in {time.monotonic() - t0:.0f} s under {done.parent}",
              flush=True)
    return done.parent, json.loads(done.read_text())["events"]


def compacted(spark, folder: Path) -> Path:
    """The Parquet form of folder/json (written once, by the job `mccs analyze --compact` runs)."""
    from mccs.analytics.spark import compact
    out = folder / "parquet"
    if not (out / "_SUCCESS").exists():
        t0 = time.monotonic()
        compact(spark, [str(folder / "json")], str(out))
        print(f"compacted to Parquet in {time.monotonic() - t0:.0f} s", flush=True)
    return out


def _seconds(job: Callable[[], T]) -> tuple[float, T]:
    t0 = time.monotonic()
    result = job()
    return time.monotonic() - t0, result


def timed(spark, path: Path, events: int) -> float:
    """Seconds for one whole analysis (every figure of summary.json, no report written)."""
    from mccs.analytics.spark import analyze
    seconds, summary = _seconds(lambda: analyze(spark, [str(path)]))
    if summary["input"]["events"] != events:
        raise RuntimeError(f"{path}: analysed {summary['input']['events']} events, generated {events}")
    return seconds


def scans(spark, form: str, path: Path, events: int) -> dict[str, float]:
    """Seconds for Spark alone to read the `events` events of `path`: "count" (the bare scan),
    "parse" (the full scan)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from mccs.analytics.traces import DDL, FIELDS, find_inputs
    if form == "jsonl":
        df = spark.read.schema(StructType.fromDDL(DDL)).json(find_inputs([str(path)])[0])
    else:  # Parquet compacted before a field was added lacks its column (load_events reads it as null)
        df = spark.read.parquet(str(path))
        df = df.select(*[name for name, _ in FIELDS if name in df.columns])
    count, counted = _seconds(df.count)
    if counted != events:
        raise RuntimeError(f"{path}: the bare scan counted {counted} events, generated {events}")
    parse, _ = _seconds(lambda: df.select(F.max(F.xxhash64(*df.columns))).collect())
    return {"count": count, "parse": parse}


def run(args: argparse.Namespace) -> int:
    from mccs.analytics import spark_missing
    missing = spark_missing("mccs bench analyze")
    if missing:
        print(missing, file=sys.stderr)
        return 2
    from mccs.analytics.spark import start_session
    root = Path(args.dir)
    inputs = [dataset(root, n) for n in args.events]          # before Spark, which would compete for the cores
    t0 = time.monotonic()
    spark = start_session(args.master)
    start = time.monotonic() - t0
    print(f"Spark session ({args.master}) started in {start:.1f} s", flush=True)
    results: list[dict[str, Any]] = []  # a JSON record per dataset, printed below
    for folder, events in inputs:
        forms = {"jsonl": folder / "json", "parquet": compacted(spark, folder)}
        times: dict[str, list[float]] = {form: [] for form in forms}
        bare: dict[str, dict[str, list[float]]] = {form: {"count": [], "parse": []} for form in forms}
        for i in range(args.runs):                  # the forms alternate, so both see the same noise
            for form, path in forms.items():
                times[form].append(timed(spark, path, events))
                for name, seconds in scans(spark, form, path, events).items():
                    bare[form][name].append(seconds)
                print(f"  {events} events, {form:7s} run {i + 1}: {times[form][-1]:6.1f} s "
                      f"({events / times[form][-1]:9.0f} events/s); bare scan {bare[form]['count'][-1]:5.1f} s, "
                      f"full scan {bare[form]['parse'][-1]:5.1f} s", flush=True)
        med = {form: statistics.median(t) for form, t in times.items()}
        scan = {form: {name: statistics.median(t) for name, t in b.items()} for form, b in bare.items()}
        results.append({"events": events, "seconds": med, "events_per_second": {f: events / s for f, s in med.items()},
                        "parquet_speedup": med["jsonl"] / med["parquet"], "runs": times,
                        "scan_seconds": scan, "scan_runs": bare,
                        "of_bare_scan": {f: scan[f]["count"] / med[f] for f in med},
                        "of_full_scan": {f: scan[f]["parse"] / med[f] for f in med}})
    version = spark.version
    spark.stop()
    print(f"\nmccs bench analyze ({platform.node()}, {os.cpu_count()} cores, Spark {version}, {args.master}, "
          f"session start {start:.1f} s, median of {args.runs})")
    print(f"  {'events':>10}  {'JSON Lines ev/s':>16}  {'Parquet ev/s':>13}  {'Parquet/JSON':>12}"
          f"  {'of bare scan (JSON, Parquet)':>29}  {'of full scan (JSON, Parquet)':>29}")
    for r in results:
        e, bare_f, full_f = r["events_per_second"], r["of_bare_scan"], r["of_full_scan"]
        print(f"  {r['events']:>10}  {e['jsonl']:>16.0f}  {e['parquet']:>13.0f}  {r['parquet_speedup']:>11.2f}x"
              f"  {bare_f['jsonl']:>20.0%}, {bare_f['parquet']:>6.0%}"
              f"  {full_f['jsonl']:>20.0%}, {full_f['parquet']:>6.0%}")
    largest = max(results, key=lambda r: r["events"])
    for target, met in ((f"JSON Lines analysis >= 70% of the bare JSON scan rate ({largest['events']} events)",
                         largest["of_bare_scan"]["jsonl"] >= 0.7),
                        ("Parquet analysis >= 2 x the JSON Lines analysis", largest["parquet_speedup"] >= 2)):
        print(f"  target: {target}: {'met' if met else 'MISSED'}")
    print(json.dumps({"bench": "analyze", "master": args.master, "cores": os.cpu_count(), "spark": version,
                      "session_start_seconds": start, "results": results}))
    return 0
