"""`mccs analyze`: Spark analytics of trace files (docs/DESIGN.md 6 and 8).

    mccs analyze TRACE_PATH... [--master URL] [--out DIR] [--since T] [--until T] [--compact] [--quiet]

From Python: `run_analysis(paths, out=..., master=...)` returns the summary dict.
Heavy libraries (pyspark, matplotlib: the `analyze` extra) are imported inside the functions;
without pyspark the command says what to install and exits 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mccs.analytics import spark_missing
from mccs.analytics.progress import QUIET, Progress
from mccs.analytics.report import FORMATS, duration, number, pct, plural

EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="TRACE_PATH", help="trace files or folders (searched recursively)")
    parser.add_argument("--master", help="Spark master URL (default local[*])")
    parser.add_argument("--out", default="mccs-report", help="report folder (default ./mccs-report)")
    parser.add_argument("--since", help="first time analysed: ISO 8601 or epoch seconds")
    parser.add_argument("--until", help="end of the analysed time (exclusive)")
    parser.add_argument("--compact", action="store_true",
                        help="rewrite the JSON Lines as Parquet partitioned by host and date under --out")
    parser.add_argument("--quiet", action="store_true", help="no progress on the terminal")


def run(args: argparse.Namespace) -> int:
    missing = spark_missing("mccs analyze")
    if missing:
        print(missing, file=sys.stderr)
        return EXIT_USAGE
    from mccs.analytics.spark import AnalyzeError
    from mccs.analytics.traces import require_inputs
    progress = Progress(sys.stderr.isatty() and not args.quiet)
    try:
        require_inputs(args.paths)
        if args.compact:
            from mccs.analytics.spark import compact, start_session
            progress.stage("starting Spark")
            spark = start_session(args.master)
            progress.stage(f"compacting {', '.join(args.paths)} to Parquet")
            progress.watch(spark)
            r = compact(spark, args.paths, args.out)
            progress.close()
            print(f"{r['events']} events written as Parquet under {r['out']} "
                  f"({r['malformed']} malformed lines skipped)")
            return 0
        summary = run_analysis(args.paths, out=args.out, master=args.master, since=args.since, until=args.until,
                               progress=progress)
    except AnalyzeError as e:
        progress.close()
        print(f"mccs analyze: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(terminal_table(summary))
    print(f"\nreport: {Path(args.out) / 'index.html'}")
    return 0


def run_analysis(paths: list[str], out: str | None = None, master: str | None = None, since=None, until=None,
                 spark=None, progress: Progress = QUIET) -> dict:
    """Run the analysis on `paths` (with `spark` or a new session) and, when `out` is given, write
    the report there. Returns the summary dict (what summary.json holds)."""
    from mccs.analytics.report import write_report
    from mccs.analytics.spark import analyze, start_session
    if progress.on:
        progress.say(f"mccs analyze: {_found(paths)} under {', '.join(map(str, paths))}")
    if spark is None:
        progress.stage("starting Spark")
        spark = start_session(master)
    progress.watch(spark)
    try:
        summary = analyze(spark, paths, since=since, until=until, progress=progress)
    finally:
        progress.close()
    tables = summary.pop("_tables")
    if out:
        progress.stage(f"writing the report to {out}")
        write_report(summary, tables, Path(out))
    progress.stage("done")
    return summary


def _found(paths: list[str]) -> str:
    """What the paths hold, in words: "3 trace files, 1 Parquet dataset"."""
    from mccs.analytics.traces import find_inputs
    files, roots, urls = find_inputs(paths)
    return ", ".join(plural(len(x), name) for x, name in
                     ((files, "trace file"), (roots, "Parquet dataset"), (urls, "URL")) if x) or "no trace files"


def terminal_table(summary: dict) -> str:
    """The directions and the message figures, with units, for the terminal."""
    cols = ("line", "host", "dir", "frames", "bytes", "data_messages", "retransmissions", "reject_rate",
            "crc_failures", "timeouts", "availability", "utilisation")
    rows = [[FORMATS.get(c, number)(r.get(c)) for c in cols] for r in summary["directions"]]
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    out = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    m, lat, i, v = summary["messages"], summary["messages"]["latency"], summary["input"], summary["verdict"]
    out.append("")
    out.append(f"messages: accepted {m['accepted']}  delivered {m['delivered']}  lost {m['lost']}  "
               f"pending {m['pending']}  duplicated {m['duplicated']}  unmatched {m['unmatched']}")
    out.append(f"latency: p50 {duration(lat['p50'])}  p95 {duration(lat['p95'])}  p99 {duration(lat['p99'])}  "
               f"max {duration(lat['max'])}")
    if m.get("refused"):
        out.append(f"refused: {m['refused']}  " + "  ".join(f"{k} {n}" for k, n in m["refused_by_reason"].items()))
    for c in summary.get("calls", []):  # lines that are calls (docs/CALLS.md)
        failed = "  ".join(f"{k} {n}" for k, n in c["failed"].items())
        share = pct(c["data_share"]) if c["data_share"] is not None else "-"
        out.append(f"calls {c['host']}>{c['line']}: dialled {c['dialled']}  answered {c['answered']}  connected "
                   f"{c['connected']} for {duration(c['connected_seconds'])}, carrying data {share}"
                   + (f"  failed: {failed}" if failed else ""))
    r = summary.get("routing")
    if r and (r["forwarded_events"] or m["expired"] or m["notices"]["accepted"] or (r["hops_max"] or 0) > 1):
        hop = r["latency_per_hop"]
        out.append(f"routing: forwarded {r['forwarded_events']} times ({r['forwarded_messages']} messages)  "
                   f"lines crossed " + " ".join(f"{h['hops']}:{h['messages']}" for h in r["hops"])
                   + f"  per hop: p50 {duration(hop['p50'])}  p99 {duration(hop['p99'])}  "
                   f"expired {m['expired']}  notices {m['notices']['accepted']}")
    worst = v["worst_line"]
    if worst:
        out.append(f"lines: availability {pct(v['availability'])} (mean)  worst {worst['line']}: "
                   f"{pct(worst['availability'])}, {plural(worst['outages'], 'outage')}, "
                   f"{plural(worst['retransmissions'], 'retransmission')}")
    out.append(f"events {i['events']}  malformed lines {i['malformed']}  files {i['files']}")
    return "\n".join(out)
