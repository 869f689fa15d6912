"""The report of `mccs analyze` as people see it: rendered by headless Chromium for a 20-second and
a 3-day trace (no missing image, no script error, no network request), time bins that make a
curve of either, the frames per bin against a count of the files, the verdict, and progress on
a terminal (a real pseudo-terminal) but not off one or with --quiet."""
import contextlib
import csv
import gzip
import io
import json
import os
import pty
import re
import shutil
import subprocess
import threading
from collections import Counter
from pathlib import Path

import pytest

from mccs.analytics.report import duration, pct, size
from mccs.analytics.schema import time_bin
from mccs.testbed.tracegen import generate

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not found: apt-get install chromium "
                                                                "(./dev test installs it)")

# Put first in the page's <head>: records errors (scripts, resources that fail) and, once the
# page has loaded, writes what the images and the resources were into the DOM for --dump-dom.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(
  String(e.message || (e.target && (e.target.src || e.target.href)))), true);
window.addEventListener('load', () => setTimeout(() => {
  const out = document.createElement('pre'); out.id = 'probe';
  out.textContent = JSON.stringify({
    images: [...document.images].map(i => ({src: i.currentSrc || i.src, width: i.naturalWidth, complete: i.complete})),
    resources: performance.getEntriesByType('resource').map(r => r.name),
    errors: window.__errors, verdict: (document.getElementById('verdict') || {}).innerText || null});
  document.body.appendChild(out);
}, 0));
</script>"""


def render(page: Path, tmp_path: Path) -> dict:
    """Load `page` in headless Chromium (no name resolves: a network request fails, and shows) and
    return what the probe saw, with the console messages Chromium logged."""
    probe = page.with_name(f"_probe_{page.name}")
    text = page.read_text()
    head = text.index("<head>") + len("<head>")
    probe.write_text(text[:head] + PROBE + text[head:])
    try:
        r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            f"--user-data-dir={tmp_path / 'chromium-profile'}", "--host-resolver-rules=MAP * ~NOTFOUND",
                            "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom",
                            probe.as_uri()], capture_output=True, text=True, timeout=120)
    finally:
        probe.unlink()
    start = r.stdout.find('<pre id="probe">')
    assert start >= 0, f"the probe did not run: {r.stdout[-500:]} {r.stderr[-2000:]}"
    import html
    seen = json.loads(html.unescape(r.stdout[start + len('<pre id="probe">'):r.stdout.index("</pre>", start)]))
    seen["console"] = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
    return seen


def problems(seen: dict) -> list[str]:
    """What is wrong with a rendered page: a missing image, an error, a network request."""
    out = [f"image not shown: {i['src']}" for i in seen["images"] if not (i["complete"] and i["width"] > 0)]
    out += [f"error: {e}" for e in seen["errors"]] + [f"console: {c}" for c in seen["console"]]
    out += [f"network request: {u}" for u in seen["resources"] if not u.startswith(("file:", "data:"))]
    return out


@needs_chromium
@pytest.mark.timeout(120)
def test_the_browser_check_fails_on_a_broken_page(tmp_path):
    """The check can fail: an image missing, a script error, a style and an image from the network."""
    page = tmp_path / "index.html"
    page.write_text("<html><head><link rel=stylesheet href='http://example.invalid/a.css'></head><body>"
                    "<img src='missing.png'><img src='https://example.invalid/b.png'>"
                    "<script>no_such_function()</script></body></html>")
    found = problems(render(page, tmp_path))
    assert any("missing.png" in p and p.startswith("image") for p in found), found
    assert any("no_such_function" in p for p in found), found
    assert {"network request: http://example.invalid/a.css",
            "network request: https://example.invalid/b.png"} <= set(found)


def test_time_bins_and_units():
    assert [time_bin(s) for s in (20, 600, 1799, 1800, 3 * 86400, 30 * 86400)] == [1, 5, 10, 60, 1800, 21600]
    assert [pct(v) for v in (0.009709, 1.0, 0.9991, 0.99996, 0.0004, None)] == [
        "1.0%", "100%", "99.91%", ">99.99%", "<0.1%", "–"]
    assert [duration(s) for s in (0.0123, 0.4, 1, 2.345, 75, 7384, 3 * 86400 + 7200)] == [
        "12 ms", "400 ms", "1 s", "2.35 s", "1 min 15 s", "2 h 03 min", "3 d 02 h"]
    assert (size(512), size(12_345), size(5_600_000)) == ("512 B", "12.3 kB", "5.6 MB")


def frames_per_bin(files: list[str], width: int, since: float = float("-inf"), until: float = float("inf")) -> Counter:
    """Bytes sent per (host, peer, bin start), counted from the trace files."""
    count = Counter()
    for f in files:
        with (gzip.open(f, "rt") if f.endswith(".gz") else open(f)) as lines:
            for e in map(json.loads, lines):
                if e["type"] == "frame" and e["dir"] == "tx" and since <= e["ts"] < until:
                    count[(e["host"], e["line"], int(e["ts"] // width * width))] += e["bytes"]
    return count


def _bins(report: Path, width: int) -> Counter:
    with open(report / "traffic_bins.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["dir"] == "tx"]
    assert all(int(r["start"]) % width == 0 for r in rows)
    return Counter({(r["host"], next(h for h in r["line"].split("-") if h != r["host"]), int(r["start"])):
                    int(r["bytes"]) for r in rows if int(r["bytes"])})


def _analyze(args: list[str]) -> tuple[int, str]:
    """`mccs analyze ARGS` as the command runs, in this process (so on the tests' Spark session,
    tests/spark/conftest.py, which its start_session finds running: a JVM less), its stderr on a
    pseudo-terminal: what a terminal shows. The terminal is read as it is written: a full
    terminal buffer would stop the writer."""
    from mccs.cli.main import build_parser
    parsed = build_parser("analyze").parse_args(["analyze", *args])
    master, slave = pty.openpty()
    shown = bytearray()
    reader = threading.Thread(target=_read_terminal, args=(master, shown))
    reader.start()
    with os.fdopen(slave, "w", buffering=1) as tty, contextlib.redirect_stderr(tty), \
            contextlib.redirect_stdout(io.StringIO()):
        rc = parsed._run(parsed)
    reader.join(timeout=30)
    os.close(master)
    return rc, shown.decode(errors="replace")


def _read_terminal(fd: int, into: bytearray) -> None:
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the writer's end is closed
            return
        if not chunk:
            return
        into += chunk


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_short_window_bins_counted_in_the_first_pass(spark, tmp_path):
    """--since/--until ten minutes long: 5-second bins, counted in the first pass (known before it),
    agree with a count of the files; latency per bin over the same window."""
    from mccs.analytics.spark import analyze
    answers = generate(tmp_path / "traces", hosts=3, messages=400)
    root = str(tmp_path / "traces")
    since = answers["accepted_times"][100]
    until = since + 600
    summary = analyze(spark, [root], since=since, until=until)
    assert summary["time_bin_seconds"] == 5
    got = Counter({(r["host"], next(h for h in r["line"].split("-") if h != r["host"]), r["start"]): r["bytes"]
                   for r in summary["_tables"]["traffic"] if r["dir"] == "tx" and r["bytes"]})
    assert got == frames_per_bin(answers["files"], 5, since, until) and len(got) > 50
    lat = summary["_tables"]["latency"]
    assert sum(b["messages"] for b in lat) == summary["messages"]["delivered"]
    assert all(since // 5 * 5 <= b["start"] < until and b["p50"] <= b["p99"] for b in lat)


@pytest.mark.spark
@needs_chromium
@pytest.mark.timeout(300)
def test_report_of_a_20_second_trace_in_chromium_with_progress_on_a_terminal(spark, tmp_path):
    answers = generate(tmp_path / "traces", hosts=3, messages=60, duration=20, outages=0, lost=1, pending=0,
                       duplicated=1)
    report = tmp_path / "report"
    rc, err = _analyze([str(tmp_path / "traces"), "--out", str(report), "--master", "local[2]"])
    assert rc == 0, err
    lines = err.splitlines()
    assert lines[0] == f"mccs analyze: 3 trace files under {tmp_path / 'traces'}", err
    assert lines[1].startswith("  [") and lines[1].endswith("starting Spark"), err
    assert f"{answers['input']['events']:,} events read" in err and "joining the 60 messages" in err, err
    assert "writing the report" in err and lines[-1].endswith("done"), err

    summary = json.loads((report / "summary.json").read_text())
    assert summary["time_bin_seconds"] == 1 and summary["messages"]["lost"] == 1
    v = summary["verdict"]
    assert (v["accepted"], v["delivered"], v["lost"], v["duplicated"], v["clean"]) == (60, 59, 1, 1, False)
    assert v["worst_line"]["availability"] == min(ln["availability"] for ln in summary["lines"])
    got = _bins(report, 1)
    assert got == frames_per_bin(answers["files"], 1)
    for line in {k[:2] for k in got}:        # a curve: every line end sends in many one-second bins
        assert sum(1 for k in got if k[:2] == line) >= 8, line
    with open(report / "latency_bins.csv") as f:
        assert len(list(csv.DictReader(f))) >= 10

    seen = render(report / "index.html", tmp_path)
    assert problems(seen) == []
    assert {Path(i["src"]).name for i in seen["images"]} == {"throughput.png", "latency_time.png",
                                                             "availability.png", "latency.png"}
    assert "Of 60 messages accepted: 1 lost, 1 delivered twice or more." in seen["verdict"]
    page = (report / "index.html").read_text()
    assert not any(c in page for c in ("http://", "https://", "<script", "src='/", 'src="/'))


@pytest.mark.slow  # over 30 s on 2 cores: in ./dev test -m slow, not the default run
@pytest.mark.spark
@needs_chromium
@pytest.mark.timeout(300)
def test_report_of_a_3_day_trace_in_chromium_quiet(spark, tmp_path):
    answers = generate(tmp_path / "traces", hosts=4, messages=2000, duration=3 * 86400, outages=6)
    report = tmp_path / "report"
    rc, err = _analyze([str(tmp_path / "traces"), "--out", str(report), "--master", "local[2]", "--quiet"])
    assert rc == 0 and err == "", err           # --quiet on a terminal: no progress (and no Spark chatter)

    summary = json.loads((report / "summary.json").read_text())
    assert summary["time_bin_seconds"] == 1800
    assert _bins(report, 1800) == frames_per_bin(answers["files"], 1800)
    with open(report / "outages.csv") as f:
        outages = list(csv.DictReader(f))
    downs = sum(d["downs"] for d in summary["directions"] if d["dir"] == "tx")
    assert len(outages) == downs > 0 and all(float(o["seconds"]) >= 25 for o in outages)
    with open(report / "latency_bins.csv") as f:
        assert len(list(csv.DictReader(f))) > 100       # a curve over the three days

    seen = render(report / "index.html", tmp_path)
    assert problems(seen) == []
    assert len(seen["images"]) == 4
    worst = summary["verdict"]["worst_line"]
    assert worst["line"] in seen["verdict"] and pct(worst["availability"]) in seen["verdict"]
    page = (report / "index.html").read_text()
    assert f"<h2>Outages ({downs})</h2>" in page
    assert not re.search(r"\d\.\d{5}", page)          # figures rounded for people, no raw 0.009709
