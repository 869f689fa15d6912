"""`mccs analyze`: Spark analytics of trace files (DESIGN.md 6 and 8).

    mccs analyze TRACE_PATH... [--master URL] [--out DIR] [--since T] [--until T] [--compact]

From Python: `run_analysis(paths, out=..., master=...)` returns the summary dict.
Heavy libraries (pyspark, matplotlib: the `analyze` extra) are imported inside the functions;
without pyspark the command says what to install and exits 2.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from mccs.analytics import spark_missing
from mccs.analytics.schema import (DIRECTION_COLUMNS, HOPS_COLUMNS, HOST_COLUMNS, LINE_COLUMNS, MINUTE,
                                   PROBLEM_COLUMNS)

EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="TRACE_PATH", help="trace files or folders (searched recursively)")
    parser.add_argument("--master", help="Spark master URL (default local[*])")
    parser.add_argument("--out", default="mccs-report", help="report folder (default ./mccs-report)")
    parser.add_argument("--since", help="first time analysed: ISO 8601 or epoch seconds")
    parser.add_argument("--until", help="end of the analysed time (exclusive)")
    parser.add_argument("--compact", action="store_true",
                        help="rewrite the JSON Lines as Parquet partitioned by host and date under --out")


def run(args: argparse.Namespace) -> int:
    missing = spark_missing("mccs analyze")
    if missing:
        print(missing, file=sys.stderr)
        return EXIT_USAGE
    from mccs.analytics.spark import AnalyzeError
    try:
        if args.compact:
            from mccs.analytics.spark import compact, start_session
            spark = start_session(args.master)
            r = compact(spark, args.paths, args.out)
            print(f"{r['events']} events written as Parquet under {r['out']} ({r['malformed']} malformed lines skipped)")
            return 0
        summary = run_analysis(args.paths, out=args.out, master=args.master, since=args.since, until=args.until)
    except AnalyzeError as e:
        print(f"mccs analyze: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(terminal_table(summary))
    print(f"\nreport: {Path(args.out) / 'index.html'}")
    return 0


def run_analysis(paths: list[str], out: str | None = None, master: str | None = None, since=None, until=None,
                 spark=None) -> dict:
    """Run the analysis on `paths` (with `spark` or a new session) and, when `out` is given, write
    the report there. Returns the summary dict (what summary.json holds)."""
    from mccs.analytics.spark import analyze, start_session
    spark = spark or start_session(master)
    summary = analyze(spark, paths, since=since, until=until)
    tables = summary.pop("_tables")
    if out:
        write_report(summary, tables, Path(out))
    return summary


def write_report(summary: dict, tables: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    files = {"summary": "summary.json", "tables": [], "plots": []}
    for name, rows, cols in (("directions", summary["directions"], DIRECTION_COLUMNS),
                             ("lines", summary["lines"], LINE_COLUMNS), ("hosts", summary["hosts"], HOST_COLUMNS),
                             ("minutes", tables["minutes"], None), ("up_intervals", tables["up"], None),
                             ("latency_histogram", tables["histogram"], None),
                             ("message_problems", tables["problems"], PROBLEM_COLUMNS),
                             ("hops_histogram", tables["hops"], HOPS_COLUMNS)):
        _csv(out / f"{name}.csv", rows, cols)
        files["tables"].append(f"{name}.csv")
    try:
        files["plots"] = _plots(summary, tables, out)
    except Exception as e:              # plots are a convenience: the figures are in the tables
        print(f"mccs analyze: plots not drawn: {e}", file=sys.stderr)
    summary["files"] = files
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "index.html").write_text(_html(summary, files))


def _csv(path: Path, rows: list[dict], cols) -> None:
    cols = list(cols or (rows[0].keys() if rows else []))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def _plots(summary: dict, tables: dict, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = []
    ws, we = summary["input"]["window"]["start"], summary["input"]["window"]["end"]

    def part(minute: int) -> tuple[float, float]:
        """The middle of a minute's share of the window (minutes from its start) and its seconds:
        a run shorter than a minute is one partial minute, not a rate over sixty seconds."""
        lo, hi = max(minute, ws), min(minute + MINUTE, we)
        return ((lo + hi) / 2 - ws) / 60, max(hi - lo, 1e-3)
    lines = sorted({m["line"] for m in tables["minutes"]})
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for ln in lines:
        per: dict[int, list[int]] = {}
        for m in tables["minutes"]:
            if m["line"] == ln and m["dir"] == "tx":
                v = per.setdefault(m["minute"], [0, 0])
                v[0] += m["bytes"]
                v[1] += m["retransmissions"]
        xs = sorted(per)
        a1.plot([part(x)[0] for x in xs], [per[x][0] / part(x)[1] for x in xs], marker="o", label=ln)
        a2.plot([part(x)[0] for x in xs], [per[x][1] * 60 / part(x)[1] for x in xs], marker="o", label=ln)
    a1.set_ylabel("bytes/s sent (both ends)")
    a2.set_ylabel("retransmissions/min")
    a2.set_xlabel("minutes")
    if lines:
        a1.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out / "throughput.png")
    plt.close(fig)
    names.append("throughput.png")
    fig, ax = plt.subplots(figsize=(8, 4))
    h = tables["histogram"]
    if h:
        ax.bar([r["low"] for r in h], [r["count"] for r in h], width=[r["high"] - r["low"] for r in h], align="edge")
        ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency (s)")
    ax.set_ylabel("messages")
    fig.tight_layout()
    fig.savefig(out / "latency.png")
    plt.close(fig)
    names.append("latency.png")
    fig, ax = plt.subplots(figsize=(10, 1 + 0.4 * max(1, len(summary["directions"]) // 2)))
    sides = sorted({(u["line"], u["host"]) for u in tables["up"]})
    for i, side in enumerate(sides):
        spans = [((u["start"] - ws) / 60, (u["end"] - u["start"]) / 60) for u in tables["up"] if (u["line"], u["host"]) == side]
        ax.broken_barh(spans, (i - 0.4, 0.8), color="tab:green")
    ax.set_yticks(range(len(sides)), [f"{ln} at {h}" for ln, h in sides])
    ax.set_xlabel("minutes (green: UP)")
    fig.tight_layout()
    fig.savefig(out / "availability.png")
    plt.close(fig)
    names.append("availability.png")
    return names


def _html(summary: dict, files: dict) -> str:
    import html
    def table(rows, cols):
        head = "".join(f"<th>{c}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows)
        return f"<table border=1 cellspacing=0><tr>{head}</tr>{body}</table>"
    msg = _flat(summary["messages"])
    routing = _flat({k: v for k, v in summary["routing"].items() if k != "hops"})
    parts = ["<html><head><meta charset='utf-8'><title>MCCS trace report</title></head><body>",
             "<h1>MCCS trace report</h1>",
             f"<p>{summary['input']['events']} events, {summary['input']['malformed']} malformed lines</p>",
             "<h2>Messages</h2>", table([msg], list(msg)),
             "<h2>Routing</h2>", table([routing], list(routing)),
             "<h3>Lines crossed by the delivered messages</h3>", table(summary["routing"]["hops"], HOPS_COLUMNS),
             "<h2>Lines</h2>", table(summary["lines"], LINE_COLUMNS),
             "<h2>Directions</h2>", table(summary["directions"], DIRECTION_COLUMNS),
             "<h2>Hosts</h2>", table(summary["hosts"], HOST_COLUMNS)]
    parts += [f"<h2>{p}</h2><img src='{p}'>" for p in files["plots"]]
    parts += ["<p>" + " ".join(f"<a href='{t}'>{t}</a>" for t in files["tables"]) + " <a href='summary.json'>summary.json</a></p>",
              "</body></html>"]
    return "\n".join(parts)


def _flat(d: dict, prefix: str = "") -> dict:
    """Nested figures as one row: {"latency": {"p50": 1}} -> {"latency_p50": 1}."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}_"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def terminal_table(summary: dict) -> str:
    cols = ("line", "host", "dir", "frames", "bytes", "data_messages", "retransmissions", "reject_rate",
            "crc_failures", "timeouts", "availability", "utilisation")
    rows = [[_fmt(r.get(c)) for c in cols] for r in summary["directions"]]
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    out = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    m, lat, i = summary["messages"], summary["messages"]["latency"], summary["input"]
    out.append("")
    out.append(f"messages: accepted {m['accepted']}  delivered {m['delivered']}  lost {m['lost']}  "
               f"pending {m['pending']}  duplicated {m['duplicated']}  unmatched {m['unmatched']}")
    out.append(f"latency s: p50 {_fmt(lat['p50'])}  p95 {_fmt(lat['p95'])}  p99 {_fmt(lat['p99'])}  max {_fmt(lat['max'])}")
    r = summary.get("routing")
    if r and (r["forwarded_events"] or m["expired"] or m["notices"]["accepted"] or (r["hops_max"] or 0) > 1):
        hop = r["latency_per_hop"]
        out.append(f"routing: forwarded {r['forwarded_events']} times ({r['forwarded_messages']} messages)  "
                   f"lines crossed " + " ".join(f"{h['hops']}:{h['messages']}" for h in r["hops"])
                   + f"  per hop s: p50 {_fmt(hop['p50'])}  p99 {_fmt(hop['p99'])}  "
                   f"expired {m['expired']}  notices {m['notices']['accepted']}")
    out.append(f"events {i['events']}  malformed lines {i['malformed']}  files {i['files']}")
    return "\n".join(out)
