"""The report's plots (matplotlib, PNG files beside index.html).

Time runs along a UTC date axis in bins of `time_bin_seconds` (schema.time_bin: seconds for a
short demo, minutes or hours for days of traces), so every window draws a curve. Empty bins
count zero traffic, and no latency (a gap, not a line across it).
"""
from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from mccs.analytics.report import duration, outages, plural

if TYPE_CHECKING:  # matplotlib is imported only when the plots are drawn
    from matplotlib.figure import Figure

DOWN, NOT_UP, UP = "tab:red", "lightgray", "tab:green"


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, timezone.utc)


def draw(summary: dict, tables: dict, out: Path) -> list[str]:
    """Draw the plots into `out`; their file names, in the order the page shows them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    w = summary["input"]["window"]
    ws, we, width = w["start"], w["end"], summary["time_bin_seconds"]
    starts = list(range(int(ws // width * width), int(we) + 1, width)) or [int(ws)]
    unit = duration(width)
    names = []
    for name, plot in (("throughput.png", _traffic), ("latency_time.png", _latency_over_time),
                       ("availability.png", _timeline), ("latency.png", _histogram)):
        fig = plot(plt, summary, tables, ws, we, width, starts, unit)
        fig.tight_layout()
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        names.append(name)
    return names


def _time_axis(ax, ws: float, we: float) -> None:
    """UTC along x over the window, ticks as fits its length."""
    import matplotlib.dates as mdates
    ax.set_xlim(_utc(ws), _utc(we))
    locator = mdates.AutoDateLocator(tz=timezone.utc)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=timezone.utc))
    ax.grid(True, alpha=0.3)


def _traffic(plt: ModuleType, summary: dict, tables: dict, ws: float, we: float, width: int,
             starts: list[int], unit: str) -> Figure:
    """Bytes per second sent on each line (both ends) and its retransmissions, per bin."""
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    by_line: dict[str, dict[int, list[int]]] = {}
    for r in tables["traffic"]:
        if r["dir"] == "tx":
            v = by_line.setdefault(r["line"], {}).setdefault(r["start"], [0, 0])
            v[0] += r["bytes"]
            v[1] += r["retransmissions"]
    mark = "o" if len(starts) <= 60 else None
    xs = [_utc(max(s, ws) + (min(s + width, we) - max(s, ws)) / 2) for s in starts]
    for line, per in sorted(by_line.items()):
        # a bin cut by the window's ends counts its part, so a short run is not a rate over a whole bin
        a1.plot(xs, [per.get(s, (0, 0))[0] / max(min(s + width, we) - max(s, ws), 1e-3) for s in starts],
                marker=mark, ms=3, label=line)
        a2.plot(xs, [per.get(s, (0, 0))[1] for s in starts], marker=mark, ms=3, label=line)
    a1.set_ylabel("bytes/s sent")
    a1.set_title(f"per {unit}, both ends of each line", fontsize="medium")
    a2.set_ylabel(f"retransmissions per {unit}")
    if by_line:
        a1.legend(fontsize="small", ncol=min(6, len(by_line)))
    for a in (a1, a2):
        _time_axis(a, ws, we)
        a.set_ylim(bottom=0)
    a2.set_xlabel("UTC")
    return fig


def _latency_over_time(plt: ModuleType, summary: dict, tables: dict, ws: float, we: float, width: int,
                       starts: list[int], unit: str) -> Figure:
    """p50 and p99 of the latency of the messages accepted in each bin."""
    fig, ax = plt.subplots(figsize=(11, 3.6))
    per = {r["start"]: r for r in tables["latency"]}
    mark = "o" if len(starts) <= 60 else "."
    xs = [_utc(max(s, ws) + (min(s + width, we) - max(s, ws)) / 2) for s in starts]
    values = []
    for key, style in (("p99", "tab:red"), ("p50", "tab:blue")):
        ys = [per[s][key] if s in per else math.nan for s in starts]
        values += [y for y in ys if not math.isnan(y)]
        ax.plot(xs, ys, marker=mark, ms=3, color=style, label=key)
    if values and min(values) > 0 and max(values) / min(values) > 50:
        ax.set_yscale("log")
    ax.set_ylabel("seconds")
    ax.set_title(f"end-to-end latency of the messages accepted in each {unit}", fontsize="medium")
    if values:
        ax.legend(fontsize="small")
    _time_axis(ax, ws, we)
    ax.set_xlabel("UTC")
    return fig


def _timeline(plt: ModuleType, summary: dict, tables: dict, ws: float, we: float, width: int,
              starts: list[int], unit: str) -> Figure:
    """One row per line end: green UP, red DOWN after an UP (an outage, marked with a triangle so
    a short one shows on a long window), grey before its first UP."""
    import matplotlib.dates as mdates
    sides = sorted({(d["line"], d["host"]) for d in summary["directions"]}
                   | {(u["line"], u["host"]) for u in tables["up"]})
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.35 * max(1, len(sides))))
    day = 86400.0

    def span(a, b):
        return mdates.date2num(_utc(a)), (b - a) / day

    gone = outages(summary, tables["up"])
    for i, side in enumerate(reversed(sides)):
        ups = sorted((u["start"], u["end"]) for u in tables["up"] if (u["line"], u["host"]) == side)
        down = [(o["start"], o["end"] or we) for o in gone if (o["line"], o["host"]) == side]
        first = ups[0][0] if ups else we
        if first > ws:
            ax.broken_barh([span(ws, first)], (i - 0.35, 0.7), color=NOT_UP)
        ax.broken_barh([span(a, b) for a, b in ups], (i - 0.35, 0.7), color=UP)
        ax.broken_barh([span(a, b) for a, b in down], (i - 0.35, 0.7), color=DOWN)
        if down:
            ax.plot([_utc(a) for a, _ in down], [i + 0.45] * len(down), "v", color=DOWN, ms=7)
    ax.set_yticks(range(len(sides)), [f"{ln} at {h}" for ln, h in reversed(sides)])
    ax.set_ylim(-0.6, len(sides) - 0.4 + 0.3)
    ax.set_title(f"green UP, red DOWN ({plural(len(gone), 'outage')}, each marked ▼), "
                 f"grey before the first UP", fontsize="medium")
    _time_axis(ax, ws, we)
    ax.set_xlabel("UTC")
    return fig


def _histogram(plt: ModuleType, summary: dict, tables: dict, ws: float, we: float, width: int,
               starts: list[int], unit: str) -> Figure:
    fig, ax = plt.subplots(figsize=(11, 3.6))
    h = tables["histogram"]
    if h:
        ax.bar([r["low"] for r in h], [r["count"] for r in h], width=[r["high"] - r["low"] for r in h], align="edge")
        ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency (s)")
    ax.set_ylabel("messages")
    ax.grid(True, alpha=0.3)
    return fig
