"""mccs analyze against the trace generator's known answers (local Spark, one session)."""
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mccs.analytics.command import run_analysis, terminal_table
from mccs.testbed.tracegen import generate, latency_stats, up_seconds

pytestmark = pytest.mark.spark
# The tests that take the session (tests/spark/conftest.py) are in xdist_group "spark": one worker,
# one JVM. A second session on another worker cost the run some 20 CPU-seconds (its JVM's start and
# warm-up) on two cores that the rest of the suite keeps busy.


def _same(got, want, path=""):
    if isinstance(want, dict):
        for k, v in want.items():
            _same(got[k], v, f"{path}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), path
    else:
        assert got == want, path


def _refusals(host_dir) -> int:
    """End-to-end refusals (docs/E2E.md) as a destination traces them, in a file of their own; with
    no origin or MSG_ID, so that no message's figures move. How many were written."""
    reasons = ["bad_tag", "bad_tag", "unsigned", "not_accepted", "a segment's sentence"]
    with open(host_dir / f"{host_dir.name}-1700000000-900.jsonl", "w") as f:
        for i, reason in enumerate(reasons):
            f.write(json.dumps({"v": 1, "ts": 1700000010.0 + i, "host": host_dir.name, "line": "AA", "proto": "async",
                                "type": "msg", "kind": "refused", "reason": reason}) + "\n")
    return len(reasons)


def _calls(host_dir) -> int:
    """The call events of a line that is a call (docs/CALLS.md), to peer ZZ, which carried no frame
    here: two calls dialled (one BUSY), one answered, two connected for 10 and 5 s."""
    calls = [("dial", {}), ("connect", {"result": "CONNECT 9600"}),
             ("hangup", {"result": "idle for 60 s", "duration": 10.0, "bytes": 900}),
             ("dial", {}), ("result", {"result": "BUSY"}), ("answer", {}), ("connect", {"result": "CONNECT 9600"}),
             ("hangup", {"result": "NO CARRIER", "duration": 5.0, "bytes": 300})]
    with open(host_dir / f"{host_dir.name}-1700000000-901.jsonl", "w") as f:
        for i, (kind, fields) in enumerate(calls):
            f.write(json.dumps({"v": 1, "ts": 1700000020.0 + i, "host": host_dir.name, "line": "ZZ",
                                "proto": "async", "type": "call", "kind": kind, **fields}) + "\n")
    return len(calls)


@pytest.mark.timeout(240)
def test_known_answers_with_wrap_and_malformed(spark, tmp_path):
    answers = generate(tmp_path / "traces", hosts=4, messages=1500, id_space=200, malformed=9,
                       lost=4, pending=3, duplicated=2, rotate_events=4000, noise_rate=0.02)
    assert any(f.endswith(".jsonl.gz") for f in answers["files"])
    refused, calls = _refusals(tmp_path / "traces" / "AB"), _calls(tmp_path / "traces" / "AB")
    summary = run_analysis([str(tmp_path / "traces")], out=str(tmp_path / "report"), spark=spark)
    for key in ("directions", "lines", "messages", "hosts"):
        _same(summary[key], answers[key], key)
    _same(summary["input"], {"events": answers["input"]["events"] + refused + calls,
                             **{k: answers["input"][k] for k in ("malformed", "window")}}, "input")
    assert summary["messages"]["refused"] == refused == 5  # (issue 34) counted apart, by reason
    assert summary["messages"]["refused_by_reason"] == {"bad_tag": 2, "unsigned": 1, "not_accepted": 1, "other": 1}
    assert "refused: 5" in terminal_table(summary)
    assert summary["calls"] == [{"host": "AB", "line": "ZZ", "dialled": 2, "answered": 1, "connected": 2,
                                 "failed": {"BUSY": 1}, "connected_seconds": 15.0, "data_share": None}]
    assert "calls AB>ZZ: dialled 2  answered 1  connected 2" in terminal_table(summary)
    assert summary["messages"]["lost"] == 4 and summary["messages"]["duplicated"] == 2
    on_disk = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert on_disk["schema_version"] == 1 and on_disk["messages"]["lost"] == 4
    for name in ("index.html", "directions.csv", "throughput.png", "latency.png", "availability.png"):
        assert (tmp_path / "report" / name).stat().st_size > 0


@pytest.mark.timeout(60)
def test_a_local_session_runs_the_throughput_collector(spark):
    """A local master's JVM runs every task: the throughput collector, not G1 (issue 15)."""
    from mccs.analytics.session import LOCAL_GC, _gc_chosen
    if _gc_chosen():
        pytest.skip("a collector is chosen in the environment's JVM options")
    assert LOCAL_GC in spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    assert {b.getName() for b in beans} == {"PS Scavenge", "PS MarkSweep"}


@pytest.mark.parametrize("options, chosen", [("", False), ("-XX:+PrintGCDetails -Xlog:gc", False),
                                             ("-Xmx2g -XX:+UseG1GC", True), ("-XX:+UseZGC", True)])
def test_a_collector_chosen_in_the_environment_is_left_alone(monkeypatch, options, chosen):
    from mccs.analytics.session import JAVA_OPTION_VARIABLES, _gc_chosen
    for v in JAVA_OPTION_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("JDK_JAVA_OPTIONS", options)
    assert _gc_chosen() is chosen


@pytest.mark.timeout(90)
def test_no_traces_is_a_clear_error(tmp_path):
    # (said before a JVM starts: a Python start, not a JVM's 10 to 50 s)
    r = subprocess.run([sys.executable, "-m", "mccs.cli", "analyze", str(tmp_path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "no trace files" in r.stderr


def _figures(summary: dict) -> dict:
    """What must not depend on the input form or the engine."""
    return {k: summary[k] for k in ("directions", "lines", "messages", "hosts")} | {
        "events": summary["input"]["events"], "window": summary["input"]["window"]}


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> tuple[str, dict]:
    """Small generated traces (no malformed lines) shared by the tests below, with their answers."""
    root = tmp_path_factory.mktemp("gen") / "traces"
    answers = generate(root, hosts=3, messages=400, outages=3, rotate_events=3000)
    return str(root), answers


@pytest.mark.slow  # over 30 s on 2 cores: in ./dev test -m slow, not the default run
@pytest.mark.timeout(300)  # about 40 s; 180 s once with the suite in parallel on a machine loaded besides
def test_compact_to_parquet_gives_the_same_figures(spark, traces, tmp_path):
    from mccs.analytics.spark import compact
    root, answers = traces
    written = compact(spark, [root], str(tmp_path / "parquet"))
    assert written["events"] == answers["input"]["events"] and written["malformed"] == 0
    hosts = sorted(p.name for p in (tmp_path / "parquet").glob("host=*"))
    assert hosts == [f"host={h['host']}" for h in answers["hosts"]]
    assert all(p.name.startswith("date=") for p in (tmp_path / "parquet").glob("host=*/*"))
    from_json = run_analysis([root], spark=spark)
    from_parquet = run_analysis([str(tmp_path / "parquet")], spark=spark)
    assert from_parquet["input"]["format"] == "parquet" and from_json["input"]["format"] == "jsonl"
    _same(_figures(from_parquet), _figures(from_json))


def _read_events(files: list[str]) -> list[dict]:
    events = []
    for f in files:
        with (gzip.open(f, "rt") if f.endswith(".gz") else open(f)) as lines:
            events += [json.loads(line) for line in lines]
    return events


def _window_answers(events: list[dict], since: float, until: float) -> dict:
    """An independent Python count of what the window [since, until) holds (MSG_IDs do not wrap here)."""
    inside = [e for e in events if since <= e["ts"] < until]
    frames = Counter((e["host"], e["line"], e["dir"], e["kind"]) for e in inside if e["type"] == "frame")
    nbytes = Counter()
    for e in inside:
        if e["type"] == "frame":
            nbytes[(e["host"], e["line"], e["dir"])] += e["bytes"]
    by_key: dict[tuple, list[dict]] = defaultdict(list)
    for e in sorted((e for e in inside if e["type"] == "msg"), key=lambda e: e["ts"]):
        by_key[(e["origin"], e["msg_id"])].append(e)
    accepted = {k: v for k, v in by_key.items() if v[0]["kind"] == "accepted"}
    kinds = {k: Counter(e["kind"] for e in v) for k, v in accepted.items()}
    latencies = sorted(next(e["ts"] for e in v if e["kind"] == "delivered") - v[0]["ts"]
                       for k, v in accepted.items() if kinds[k]["delivered"])
    up_down = defaultdict(list)
    for e in events:
        if e["type"] == "line" and e["kind"] in ("up", "down"):
            up_down[(e["host"], e["line"])].append((e["ts"], e["kind"]))
    return {
        "events": len(inside), "frames": frames, "bytes": nbytes,
        "up_seconds": {side: up_seconds(ev, since, until) for side, ev in up_down.items()},
        "messages": {"accepted": len(accepted), "delivered": sum(1 for c in kinds.values() if c["delivered"]),
                     "lost": sum(1 for c in kinds.values() if not c["received"] and not c["delivered"]),
                     "pending": sum(1 for c in kinds.values() if c["received"] and not c["delivered"]),
                     "duplicated": sum(1 for c in kinds.values() if c["delivered"] > 1),
                     "unmatched": len(by_key) - len(accepted),
                     "latency": latency_stats(latencies)},
        "hosts": Counter((e["host"], e["kind"]) for e in inside if e["type"] == "msg"),
    }


@pytest.mark.timeout(180)
def test_since_until_window(spark, traces):
    root, answers = traces
    accepted = answers["accepted_times"]            # the window cuts messages at both ends
    iso = datetime.fromtimestamp(accepted[100] + 0.0005, timezone.utc).isoformat().replace("+00:00", "Z")
    since, until = datetime.fromisoformat(iso).timestamp(), accepted[300] + 0.0005
    want = _window_answers(_read_events(answers["files"]), since, until)
    got = run_analysis([root], spark=spark, since=iso, until=str(until))
    assert got["input"]["window"] == {"start": since, "end": until, "seconds": until - since}
    assert got["input"]["events"] == want["events"]
    _same(got["messages"], want["messages"], "messages")
    assert want["messages"]["unmatched"] > 0 and want["messages"]["lost"] > 0
    for d in got["directions"]:
        side = (d["host"], d["peer"], d["dir"])
        assert d["frames_by_kind"] == {k: n for (*s, k), n in sorted(want["frames"].items()) if tuple(s) == side}
        assert d["bytes"] == want["bytes"][side]
        assert d["up_seconds"] == pytest.approx(want["up_seconds"][(d["host"], d["peer"])], abs=1e-6)
    assert min(d["up_seconds"] for d in got["directions"]) < until - since     # an outage is inside
    for h in got["hosts"]:
        assert (h["accepted"], h["delivered"], h["duplicates_dropped"]) == (
            want["hosts"][(h["host"], "accepted")], want["hosts"][(h["host"], "delivered")],
            want["hosts"][(h["host"], "duplicate")])


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while not (found := re.search(pattern, log.read_text(errors="replace"))):
        assert proc.poll() is None, f"exited with {proc.returncode}: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"no {pattern!r} in {log} after {timeout} s"
        time.sleep(0.2)
    return found


@pytest.fixture
def cluster(tmp_path):
    """A standalone Spark master and one worker on 127.0.0.1 from the installed pyspark; their
    process groups are killed afterwards. Every port is the system's choice (the master's is read
    from its log), and the master's REST server, on a fixed port by default, stays off: clusters
    of tests run side by side (xdist) do not meet."""
    import pyspark
    home = os.path.dirname(pyspark.__file__)
    # the client compiler only (as conftest.py gives the drivers), here for the master, the worker
    # and the executors the worker starts (its log files take the JVM's notice of the option)
    env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1",
           "JAVA_TOOL_OPTIONS": f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} -XX:TieredStopAtLevel=1".strip(),
           "SPARK_MASTER_OPTS": f"{os.environ.get('SPARK_MASTER_OPTS', '')} -Dspark.master.rest.enabled=false".strip()}
    spark_class, deploy = f"{home}/bin/spark-class", "org.apache.spark.deploy"
    procs = []

    def start(name: str, *args: str) -> Path:
        log = tmp_path / f"{name}.log"
        with open(log, "w") as f:
            procs.append(subprocess.Popen([spark_class, f"{deploy}.{name}.{name.title()}", *args], env=env,
                                          stdout=f, stderr=subprocess.STDOUT, start_new_session=True))
        return log

    try:
        master = start("master", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
        url = _wait_for(master, r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", procs[0], 120)[1]
        _wait_for(master, "I have been elected leader", procs[0], 120)
        start("worker", url, "--host", "127.0.0.1", "--webui-port", "0", "--cores", "1", "--memory", "1g",
              "--work-dir", str(tmp_path / "work"))
        _wait_for(master, "Registering worker", procs[0], 120)
        yield url
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.mark.slow  # over 30 s on 2 cores: in ./dev test -m slow, not the default run
@pytest.mark.timeout(300)
def test_standalone_cluster_gives_the_local_figures(spark, traces, cluster, tmp_path):
    root, _ = traces
    local = run_analysis([root], spark=spark)
    r = subprocess.run([sys.executable, "-m", "mccs.cli", "analyze", root, "--master", cluster,
                        "--out", str(tmp_path / "report")], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    assert "  [" not in r.stderr and "Spark tasks" not in r.stderr       # no progress off a terminal
    remote = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert remote["engine"]["master"] == cluster
    assert "Asked to launch executor" in (tmp_path / "worker.log").read_text()
    _same(_figures(remote), _figures(local))
    exact = ("count", "p50", "p95", "p99", "max")       # Spark's percentile is exact; only the mean's sum order varies
    assert {k: remote["messages"]["latency"][k] for k in exact} == {k: local["messages"]["latency"][k] for k in exact}


@pytest.mark.slow  # over 30 s on 2 cores: in ./dev test -m slow, not the default run
@pytest.mark.timeout(240)
def test_loopback_traces_agree_with_its_verdict(spark, tmp_path, monkeypatch):
    from mccs.testbed import loopback
    from mccs.testbed.loopback import Options, run_network
    read, status = [], loopback._status     # when the verdict has read each daemon's counters
    monkeypatch.setattr(loopback, "_status", lambda d: (status(d), read.append(time.time()))[0])
    v = run_network(Options(hosts=3, protocol="mixed", ber=1e-4, messages=150, timeout=90, dir=str(tmp_path),
                            quiet=True))
    assert v["ok"], v
    summary = run_analysis(v["trace_dirs"], spark=spark)
    m = summary["messages"]
    assert (m["lost"], m["duplicated"]) == (v["lost"], v["duplicated"])
    daemons = m["notices"]  # (the daemons' own messages: custody's states and probes)
    assert (m["accepted"] - daemons["accepted"], m["delivered"] - daemons["delivered"], m["pending"], m["unmatched"]) \
        == (v["sent"], v["delivered"], 0, 0)
    assert daemons["accepted"] == daemons["delivered"] and daemons["lost"] == 0
    # No daemon restarted, so the daemons' counters cover the run as the traces do; but the
    # verdict reads them while the lines still carry keep-alives, which may meet an error or
    # two more before the daemons stop: the traces hold at least as many, and hardly more. A
    # timeout then sends again every frame its lost acknowledgement covered, up to a window
    # (a receiver acknowledges a stream of messages several at a time: Lines._ack_wait). So are
    # the traces up to the moment the last counters were read; those after it, until the daemons
    # stop, are the more the longer that takes (a loaded machine), and are not counted.
    traced = {k: sum(d[k] for d in run_analysis(v["trace_dirs"], spark=spark, until=str(max(read)))["directions"])
              for k in ("crc_failures", "retransmissions", "timeouts")}
    counted = {"crc_failures": v["crc_errors"], "retransmissions": v["retransmissions"], "timeouts": v["timeouts"]}
    more = {k: 2 + (8 * (traced["timeouts"] - counted["timeouts"]) if k == "retransmissions" else 0) for k in traced}
    assert all(counted[k] <= traced[k] <= counted[k] + more[k] for k in traced), (traced, counted)
    assert traced["crc_failures"] > 0


@pytest.mark.timeout(180)
def test_bench_ceiling_scans_read_every_event_of_both_forms(spark, traces, tmp_path):
    """`mccs bench analyze` sets the analysis against bare and full Spark scans of the same files."""
    from mccs.analytics.spark import compact
    from mccs.testbed.bench_analyze import scans
    root, answers = traces
    events = answers["input"]["events"]
    compact(spark, [root], str(tmp_path / "parquet"))
    for form, path in (("jsonl", Path(root)), ("parquet", tmp_path / "parquet")):
        seconds = scans(spark, form, path, events)
        assert set(seconds) == {"count", "parse"} and all(s > 0 for s in seconds.values())
    with pytest.raises(RuntimeError, match="counted"):
        scans(spark, "jsonl", Path(root), events + 1)
    # a dataset the bench compacted before a field was added (`frames`) is still scanned
    older = tmp_path / "older"
    spark.read.parquet(str(tmp_path / "parquet")).drop("frames").write.partitionBy("host", "date").parquet(str(older))
    assert set(scans(spark, "parquet", older, events)) == {"count", "parse"}
