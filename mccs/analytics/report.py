"""The report of `mccs analyze` in a folder: summary.json, CSV tables, plots and index.html.

index.html is what people look at: it opens with the verdict (what happened to the messages, how
available the lines were, the worst line), then the plots and the tables with their units
(percentages, ms or s, kB). It is self-contained: inline style, plots as PNG files beside it,
no script and no network reference, so it opens from a mail attachment or a file share.
"""
from __future__ import annotations

import csv
import html
import json
import sys
import time
from pathlib import Path
from typing import TypedDict

from mccs.analytics.schema import DIRECTION_COLUMNS, HOPS_COLUMNS, HOST_COLUMNS, LINE_COLUMNS, PROBLEM_COLUMNS

PROBLEMS_SHOWN = 20          # problem messages listed on the page (all are in message_problems.csv)
STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { margin-bottom: 0; } .sub { color: #666; margin-top: .2em; }
.verdict { display: flex; flex-wrap: wrap; gap: .8em; margin: 1.2em 0; padding: 1em; border-radius: 8px;
           border: 2px solid #2e7d32; background: #f1f8e9; }
.verdict.bad { border-color: #c62828; background: #fdecea; }
.verdict .headline { flex-basis: 100%; font-size: 1.25em; font-weight: 600; }
.figure { min-width: 8.5em; } .figure b { display: block; font-size: 1.6em; }
.figure span { color: #555; font-size: .9em; } .figure.alarm b { color: #c62828; }
table { border-collapse: collapse; margin: .5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; } th { background: #f3f3f3; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #ddd; margin: .3em 0 1.2em; }
"""


class ReportFiles(TypedDict):
    """summary.json's `files`: what write_report wrote under `out`, named relative to it."""
    summary: str
    tables: list[str]
    plots: list[str]


def write_report(summary: dict, tables: dict, out: Path) -> None:
    """summary.json, the CSV tables, the plots and index.html under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    files: ReportFiles = {"summary": "summary.json", "tables": [], "plots": []}
    for name, rows, cols in (("directions", summary["directions"], DIRECTION_COLUMNS),
                             ("lines", summary["lines"], LINE_COLUMNS), ("hosts", summary["hosts"], HOST_COLUMNS),
                             ("minutes", tables["minutes"], None), ("up_intervals", tables["up"], None),
                             ("latency_histogram", tables["histogram"], None),
                             ("message_problems", tables["problems"], PROBLEM_COLUMNS),
                             ("hops_histogram", tables["hops"], HOPS_COLUMNS),
                             ("traffic_bins", tables["traffic"], None), ("latency_bins", tables["latency"], None),
                             ("outages", outages(summary, tables["up"]), None)):
        _csv(out / f"{name}.csv", rows, cols)
        files["tables"].append(f"{name}.csv")
    try:
        from mccs.analytics.plots import draw
        files["plots"] = draw(summary, tables, out)
    except Exception as e:              # plots are a convenience: the figures are in the tables
        print(f"mccs analyze: plots not drawn: {e}", file=sys.stderr)
    summary["files"] = files
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "index.html").write_text(page(summary, tables, files))


def _csv(path: Path, rows: list[dict], cols) -> None:
    cols = list(cols or (rows[0].keys() if rows else []))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def outages(summary: dict, up: list[dict]) -> list[dict]:
    """Each line end's DOWN spans after it had been UP (the time before its first UP, a sign-on
    at the start, is not an outage), from the UP intervals; one still DOWN at the window's end
    has `end` null."""
    end = summary["input"]["window"]["end"]
    by_side: dict[tuple, list[dict]] = {}
    for u in up:
        by_side.setdefault((u["line"], u["host"]), []).append(u)
    rows = []
    for (line, host), spans in sorted(by_side.items()):
        spans.sort(key=lambda u: u["start"])
        for i, u in enumerate(spans):
            nxt = spans[i + 1]["start"] if i + 1 < len(spans) else None
            if nxt is not None or u["end"] < end:
                rows.append({"line": line, "host": host, "start": u["end"], "end": nxt,
                             "seconds": (nxt if nxt is not None else end) - u["end"]})
    return rows


# -- numbers as people read them -----------------------------------------------------------
def pct(v) -> str:
    if v is None:
        return "–"
    p = 100 * v
    if p == 0 or p == 100:
        return f"{p:.0f}%"
    if p < 0.1:
        return "<0.1%"
    if p > 99.99:
        return ">99.99%"
    return f"{p:.2f}%" if p > 99.9 else f"{p:.1f}%"


def duration(s) -> str:
    """Seconds as ms, s, min, h or d, the unit fitting the size."""
    if s is None:
        return "–"
    if s < 1:
        return f"{s * 1000:.1f} ms" if s < 0.01 else f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.0f} s" if s == int(s) else f"{s:.2f} s" if s < 10 else f"{s:.1f} s"
    for unit, big, small, step in (("min", 60, "s", 1), ("h", 3600, "min", 60), ("d", 86400, "h", 3600)):
        if s < big * (60 if unit == "min" else 24) or unit == "d":
            whole, rest = divmod(round(s / step), big // step)
            return f"{whole} {unit} {rest:02d} {small}" if rest else f"{whole} {unit}"
    raise AssertionError("unreachable")


def size(n) -> str:
    if n is None:
        return "–"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def when(t) -> str:
    if t is None:
        return "–"
    frac = f"{t % 1:.3f}"[1:]
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + frac


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' * (n != 1)}"


def number(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, list):
        return " ".join(map(str, v))
    return str(v)


# What each column is shown as (any other: number); a table may change one (message_problems: accepted).
FORMATS = {"availability": pct, "reject_rate": pct, "utilisation": pct, "utilisation_peak_minute": pct,
           "retransmission_rate": pct, "up_seconds": duration, "seconds": duration, "bytes": size,
           "start": when, "end": when, "mean": duration, "p50": duration, "p95": duration, "p99": duration,
           "max": duration}
HEADERS = {"up_seconds": "up time", "utilisation_peak_minute": "peak minute utilisation", "seconds": "duration",
           "crc_failures": "check failures", "send_list_hwm": "SEND_LIST max", "recv_list_hwm": "RECV_LIST max",
           "duplicates_dropped": "duplicates dropped", "data_messages": "messages", "dir": "direction"}


def table(rows: list[dict], cols, formats: dict | None = None) -> str:
    formats = FORMATS | (formats or {})
    head = "".join(f"<th>{html.escape(HEADERS.get(c, c.replace('_', ' ')))}</th>" for c in cols)
    body = []
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            num = isinstance(v, (int, float)) and not isinstance(v, bool)
            cells.append(f"<td{' class=num' if num else ''}>{html.escape(formats.get(c, number)(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _figure(value: str, label: str, alarm: bool = False) -> str:
    return (f"<div class='figure{' alarm' if alarm else ''}'><b>{html.escape(value)}</b>"
            f"<span>{html.escape(label)}</span></div>")


def headline(v: dict) -> str:
    """One sentence on the messages."""
    if not v["accepted"]:
        return "No message was accepted in this window."
    if v["clean"] and not v["pending"]:
        return f"All {v['accepted']:,} messages accepted were delivered once" + (
            f" ({v['expired']:,} expired on purpose)." if v["expired"] else ".")
    trouble = [f"{v['lost']:,} lost" if v["lost"] else "", f"{v['duplicated']:,} delivered twice or more"
               if v["duplicated"] else "", f"{v['pending']:,} still waiting for delivery" if v["pending"] else ""]
    return f"Of {v['accepted']:,} messages accepted: " + ", ".join(t for t in trouble if t) + "."


def verdict_block(v: dict) -> str:
    worst = v["worst_line"]
    figures = [_figure(f"{v['accepted']:,}", "accepted"),
               _figure(f"{v['delivered']:,}", f"delivered ({pct(v['delivered_share'])})"),
               _figure(f"{v['lost']:,}", "lost", bool(v["lost"])),
               _figure(f"{v['duplicated']:,}", "duplicated", bool(v["duplicated"]))]
    if v["pending"]:
        figures.append(_figure(f"{v['pending']:,}", "pending"))
    if v["expired"]:
        figures.append(_figure(f"{v['expired']:,}", "expired"))
    figures.append(_figure(duration(v["latency_p50"]), f"latency p50 (p99 {duration(v['latency_p99'])})"))
    figures.append(_figure(pct(v["availability"]), "line availability (mean)"))
    if worst:
        detail = (f"{pct(worst['availability'])} available, {plural(worst['outages'], 'outage')}, "
                  f"{plural(worst['retransmissions'], 'retransmission')}"
                  + (f" ({pct(worst['retransmission_rate'])} of messages)" if worst["retransmission_rate"] else ""))
        figures.append(_figure(worst["line"], f"worst line: {detail}"))
    return (f"<div class='verdict{'' if v['clean'] else ' bad'}' id='verdict'>"
            f"<div class='headline'>{html.escape(headline(v))}</div>{''.join(figures)}</div>")


PLOT_TITLES = {"throughput.png": "Traffic and retransmissions over time", "latency_time.png": "Latency over time",
               "availability.png": "Line states: UP and DOWN", "latency.png": "Latency distribution"}


def page(summary: dict, tables: dict, files: ReportFiles) -> str:
    i, m, r = summary["input"], summary["messages"], summary["routing"]
    w = i["window"]
    v = summary["verdict"]
    latency = [{"figure": name, **m_} for name, m_ in (("accepted → delivered", m["latency"]),
                                                        ("accepted → received", m["latency_received"]),
                                                        ("per line crossed", r["latency_per_hop"]))]
    message_rows = [{"figure": k.replace("_", " "), "messages": m[k]}
                    for k in ("accepted", "delivered", "lost", "pending", "duplicated", "duplicate_arrivals",
                              "unmatched", "expired")]
    message_rows += [{"figure": f"expired ({k})", "messages": n} for k, n in m["expired_by_reason"].items()]
    message_rows += [{"figure": f"refused ({k})", "messages": n} for k, n in m.get("refused_by_reason", {}).items()]
    message_rows += [{"figure": f"notices {k}", "messages": m["notices"][k]} for k in ("accepted", "delivered", "lost")]
    routing = [{"figure": "forwarded (events)", "value": r["forwarded_events"]},
               {"figure": "messages forwarded", "value": r["forwarded_messages"]},
               {"figure": "lines crossed, mean", "value": r["hops_mean"]},
               {"figure": "lines crossed, most", "value": r["hops_max"]},
               {"figure": "route changes", "value": r["route_changes"]}]
    problems = tables["problems"]
    down = outages(summary, tables["up"])
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>MCCS trace report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>MCCS trace report</h1>",
        f"<p class='sub'>{when(w['start'])} to {when(w['end'])} UTC ({duration(w['seconds'])}), "
        f"{i['events']:,} events from {i['files']:,} files, {i['malformed']:,} malformed lines; "
        f"Spark {html.escape(summary['engine']['spark'])} in {duration(summary['engine']['seconds'])}</p>",
        verdict_block(v)]
    parts += [f"<h2>{PLOT_TITLES.get(p, p)}</h2><img src='{p}' alt='{PLOT_TITLES.get(p, p)}'>" for p in files["plots"]]
    parts += [
        "<h2>Lines</h2>", table(summary["lines"], LINE_COLUMNS),
        f"<h2>Outages ({len(down)})</h2>",
        table(down, ("line", "host", "start", "end", "seconds"), {"end": lambda t: when(t) if t else "still DOWN"})
        if down else "<p>No line went DOWN.</p>",
        "<h2>Messages</h2>", table(message_rows, ("figure", "messages")),
        "<h3>Latency</h3>", table(latency, ("figure", "count", "mean", "p50", "p95", "p99", "max")),
        f"<h3>Lost, pending, doubly delivered and expired messages ({len(problems):,})</h3>",
        (table(problems[:PROBLEMS_SHOWN], PROBLEM_COLUMNS, {"accepted": when})
         + (f"<p>First {PROBLEMS_SHOWN}; all in <a href='message_problems.csv'>message_problems.csv</a>.</p>"
            if len(problems) > PROBLEMS_SHOWN else "")) if problems else "<p>None.</p>",
        "<h2>Routing</h2>", table(routing, ("figure", "value")),
        "<h3>Lines crossed by the delivered messages</h3>", table(r["hops"], HOPS_COLUMNS),
        "<h2>Hosts</h2>", table(summary["hosts"], HOST_COLUMNS),
        "<h2>Line ends and directions</h2>", table(summary["directions"], DIRECTION_COLUMNS),
        "<h2>Files</h2><p>" + " ".join(f"<a href='{t}'>{t}</a>" for t in files["tables"])
        + " <a href='summary.json'>summary.json</a></p>",
        "</body></html>"]
    return "\n".join(parts)
