"""mccs analyze over routed traffic: forwarded messages, lines crossed, per-hop latency, expired
messages and notices, and the path of each problem message, against a hand-written trace set
of a chain AA - BB - CC - DD whose figures are worked out below by hand."""
import csv
import gzip
import json
from collections import Counter, defaultdict

import pytest

from mccs.analytics.command import run_analysis
from mccs.testbed.tracegen import latency_stats

pytestmark = pytest.mark.spark

T = 1_700_000_000.0
PROTO = "async"


class Traces:
    """Events per host, as the daemons write them (docs/DESIGN.md 6), with the message fields."""

    def __init__(self):
        self.events: dict[str, list[dict]] = defaultdict(list)

    def add(self, host: str, ts: float, type_: str, kind: str, line: str | None = None, **fields) -> None:
        self.events[host].append({"v": 1, "ts": ts, "host": host, "line": line, "proto": PROTO if line else None,
                                  "type": type_, "kind": kind, **fields})

    def message(self, from_id: str, to_id: str, msg_id: int, t: float, steps: list[tuple], **accepted) -> None:
        """`steps`: (seconds after `t`, host, kind, line, more fields); `accepted` at t comes first."""
        key = dict(origin=from_id[:2], msg_id=msg_id, from_id=from_id, to_id=to_id, user_id=msg_id)
        self.add(from_id[:2], t, "msg", "accepted", **key, **accepted)
        for dt, host, kind, line, *more in steps:
            self.add(host, t + dt, "msg", kind, line, **key, **(more[0] if more else {}))

    def write(self, root) -> list[str]:
        for host, events in self.events.items():
            (root / host).mkdir(parents=True, exist_ok=True)
            with open(root / host / f"mccs-{int(T)}.jsonl", "w") as f:
                for e in sorted(events, key=lambda e: e["ts"]):
                    f.write(json.dumps(e) + "\n")
        return [str(root)]


def hop(h: int, via: str | None = None) -> dict:
    return {"hops": h, **({"via": via} if via else {})}


def chain_traces() -> Traces:
    """Messages over the chain AA - BB - CC - DD; each comment says what `mccs analyze` must see."""
    tr = Traces()
    for host, via, dist in (("AA", "BB", 3), ("BB", "CC", 2), ("CC", "DD", 1)):
        tr.add(host, T - 1, "line", "route", via, to="DD", source="learned", distance=dist)
    # (AA,1) AA->DD over three lines, delivered: to DD 0.9 s (0.3 a line), delivered after 1.5 s
    tr.message("AAu1", "DDu1", 1, T, [
        (0.1, "AA", "sent", "BB"), (0.3, "BB", "forwarded", "AA", hop(1, "CC")), (0.35, "AA", "acked", "BB"),
        (0.4, "BB", "sent", "CC"), (0.6, "CC", "forwarded", "BB", hop(2, "DD")), (0.65, "BB", "acked", "CC"),
        (0.7, "CC", "sent", "DD"), (0.9, "DD", "received", "CC", hop(3)), (0.95, "CC", "acked", "DD"),
        (1.5, "DD", "delivered", None)])
    # (AA,2) the same, slower: received after 1.5 s (0.5 a line), delivered after 2.0 s
    tr.message("AAu1", "DDu1", 2, T + 10, [
        (0.1, "AA", "sent", "BB"), (0.5, "BB", "forwarded", "AA", hop(1, "CC")), (0.55, "AA", "acked", "BB"),
        (0.6, "BB", "sent", "CC"), (1.0, "CC", "forwarded", "BB", hop(2, "DD")), (1.05, "BB", "acked", "CC"),
        (1.1, "CC", "sent", "DD"), (1.5, "DD", "received", "CC", hop(3)), (1.55, "CC", "acked", "DD"),
        (2.0, "DD", "delivered", None)])
    # (AA,3) to a neighbour over a routing line (hops 1), sent with a receipt; BB's delivered
    # notice (BB,1) goes back over one line: received after 0.3 s, delivered after 0.5 s
    tr.message("AAu1", "BBu1", 3, T + 20, [
        (0.1, "AA", "sent", "BB"), (0.2, "BB", "received", "AA", hop(1)), (0.25, "AA", "acked", "BB"),
        (0.5, "BB", "delivered", None)])
    tr.message("BBMCCS", "AAu1", 1, T + 20.5, [
        (0.1, "BB", "sent", "AA"), (0.3, "AA", "received", "BB", hop(1)), (0.35, "BB", "acked", "AA"),
        (0.5, "AA", "delivered", None)], notice="delivered")
    # (AA,4) to a neighbour over a version-1 line: `received` without hops is one line crossed
    tr.message("AAu1", "BBu2", 4, T + 30, [
        (0.1, "AA", "sent", "BB"), (0.4, "BB", "received", "AA"), (0.45, "AA", "acked", "BB"),
        (0.6, "BB", "delivered", None)])
    # (AA,5) to a process of AA: no line crossed (received with the same timestamp as accepted)
    tr.message("AAu1", "AAu2", 5, T + 40, [(0.0, "AA", "received", None), (0.2, "AA", "delivered", None)])
    # (AA,6) lost after BB: sent on to CC, never arrived
    tr.message("AAu1", "DDu1", 6, T + 50, [
        (0.1, "AA", "sent", "BB"), (0.3, "BB", "forwarded", "AA", hop(1, "CC")), (0.35, "AA", "acked", "BB"),
        (0.4, "BB", "sent", "CC")])
    # (AA,7) reaches the hop limit at CC: expired (not lost); CC's undeliverable notice (CC,1)
    # comes back over BB: received at AA after 0.6 s (two lines), delivered after 0.8 s
    tr.message("AAu1", "DDu1", 7, T + 60, [
        (0.1, "AA", "sent", "BB"), (0.3, "BB", "forwarded", "AA", hop(1, "CC")), (0.35, "AA", "acked", "BB"),
        (0.4, "BB", "sent", "CC"), (0.6, "CC", "expired", None, {"reason": "hop limit", "hops": 2}),
        (0.65, "BB", "acked", "CC")])
    tr.message("CCMCCS", "AAu1", 1, T + 60.6, [
        (0.1, "CC", "sent", "BB"), (0.3, "BB", "forwarded", "CC", hop(1, "AA")), (0.35, "CC", "acked", "BB"),
        (0.4, "BB", "sent", "AA"), (0.6, "AA", "received", "BB", hop(2)), (0.65, "BB", "acked", "AA"),
        (0.8, "AA", "delivered", None)], notice="undeliverable")
    # (AA,8) its ttl passes at its origin: expired; the undeliverable notice (AA,9) is local
    tr.message("AAu1", "DDu1", 8, T + 70, [(5.0, "AA", "expired", None, {"reason": "ttl", "hops": 0})])
    tr.message("AAMCCS", "AAu1", 9, T + 75, [(0.0, "AA", "received", None), (0.3, "AA", "delivered", None)],
               notice="undeliverable")
    # (AA,10) to CC, delivered twice (after 0.8 s and 1.0 s), one duplicate arrival dropped
    tr.message("AAu1", "CCu1", 10, T + 80, [
        (0.1, "AA", "sent", "BB"), (0.3, "BB", "forwarded", "AA", hop(1, "CC")), (0.35, "AA", "acked", "BB"),
        (0.4, "BB", "sent", "CC"), (0.6, "CC", "received", "BB", hop(2)), (0.65, "BB", "acked", "CC"),
        (0.8, "CC", "delivered", None), (0.9, "CC", "duplicate", "BB"), (1.0, "CC", "delivered", None)])
    # (BB,2) BB->DD over CC, received after 0.7 s (0.35 a line), not yet delivered: pending
    tr.message("BBu1", "DDu1", 2, T + 90, [
        (0.1, "BB", "sent", "CC"), (0.3, "CC", "forwarded", "BB", hop(1, "DD")), (0.35, "BB", "acked", "CC"),
        (0.4, "CC", "sent", "DD"), (0.7, "DD", "received", "CC", hop(2)), (0.75, "CC", "acked", "DD")])
    # (AA,11) a routing loop between BB and CC, 9 times forwarded, expired at CC at hop 10:
    # a path longer than the 8 hosts kept
    loop = [(0.1, "AA", "sent", "BB")]
    for h in range(1, 10):
        loop.append((0.1 + 0.1 * h, "BB" if h % 2 else "CC", "forwarded", "AA" if h == 1 else ("CC" if h % 2 else "BB"),
                     hop(h, "CC" if h % 2 else "BB")))
    loop.append((1.1, "CC", "expired", None, {"reason": "hop limit", "hops": 10}))
    tr.message("AAu1", "DDu1", 11, T + 100, loop)
    # (AA,1) again (MSG_ID reused): a new message, lost at its origin
    tr.message("AAu1", "DDu1", 1, T + 110, [(0.1, "AA", "sent", "BB")])
    # a forwarded event of a message accepted before the traces begin: unmatched
    tr.add("BB", T + 115, "msg", "forwarded", "AA", origin="AA", msg_id=99, from_id="AAu1", to_id="DDu1",
           user_id=99, hops=1, via="CC")
    return tr


def _stats(values: list[float]) -> dict:
    return latency_stats(sorted(values))


def _close(got: dict, want: dict) -> None:
    assert set(want) <= set(got), (got, want)
    for k, v in want.items():
        assert got[k] == (pytest.approx(v, rel=1e-9, abs=1e-9) if isinstance(v, float) else v), (k, got[k], v)


LOOP = "AA>BB>CC>BB>CC>BB>CC>BB>..."
PROBLEMS = [("AA", 6, "lost", "AA>BB"), ("AA", 7, "expired", "AA>BB>CC"), ("AA", 8, "expired", "AA"),
            ("AA", 10, "duplicated", "AA>BB>CC"), ("BB", 2, "pending", "BB>CC>DD"), ("AA", 11, "expired", LOOP),
            ("AA", 1, "lost", "AA")]


def _check(summary: dict) -> None:
    m, r = summary["messages"], summary["routing"]
    assert {k: m[k] for k in ("accepted", "delivered", "lost", "pending", "duplicated", "duplicate_arrivals",
                              "unmatched", "expired")} == {
        "accepted": 15, "delivered": 9, "lost": 2, "pending": 1, "duplicated": 1, "duplicate_arrivals": 1,
        "unmatched": 1, "expired": 3}
    assert m["expired_by_reason"] == {"hop limit": 2, "ttl": 1}
    assert m["notices"] == {"accepted": 3, "delivered": 3, "lost": 0,
                            "by_kind": {"delivered": 1, "undeliverable": 2}}
    assert r["forwarded_events"] == 19 and r["forwarded_messages"] == 8 and r["route_changes"] == 3
    assert r["hops"] == [{"hops": 0, "messages": 2}, {"hops": 1, "messages": 3}, {"hops": 2, "messages": 2},
                         {"hops": 3, "messages": 2}]
    assert r["hops_max"] == 3 and r["hops_mean"] == pytest.approx(13 / 9)
    # accepted -> first delivered, accepted -> first received, and that over the lines crossed, as
    # the traces hold them: a message accepted at T + a, an event x seconds later
    def lat(a: float, x: float, lines: int = 1) -> float:
        return ((T + a + x) - (T + a)) / lines
    _close(m["latency"], _stats([lat(0, 1.5), lat(10, 2.0), lat(20, 0.5), lat(20.5, 0.5), lat(30, 0.6), lat(40, 0.2),
                                 lat(60.6, 0.8), lat(75, 0.3), lat(80, 0.8)]))
    _close(m["latency_received"], _stats([lat(0, 0.9), lat(10, 1.5), lat(20, 0.2), lat(20.5, 0.3), lat(30, 0.4),
                                          lat(40, 0.0), lat(60.6, 0.6), lat(75, 0.0), lat(80, 0.6), lat(90, 0.7)]))
    _close(r["latency_per_hop"], _stats([lat(0, 0.9, 3), lat(10, 1.5, 3), lat(20, 0.2), lat(20.5, 0.3), lat(30, 0.4),
                                         lat(60.6, 0.6, 2), lat(80, 0.6, 2), lat(90, 0.7, 2)]))
    hosts = {h["host"]: h for h in summary["hosts"]}
    assert {h: (hosts[h]["forwarded"], hosts[h]["expired"]) for h in hosts} == {
        "AA": (0, 1), "BB": (12, 0), "CC": (7, 2), "DD": (0, 0)}


@pytest.mark.timeout(180)
def test_three_hop_chain_figures_and_paths(spark, tmp_path):
    roots = chain_traces().write(tmp_path / "traces")
    out = tmp_path / "report"
    summary = run_analysis(roots, out=str(out), spark=spark)
    _check(summary)
    with open(out / "message_problems.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["origin"], int(r["msg_id"]), r["status"], r["path"]) for r in rows] == PROBLEMS
    assert list(rows[0]) == ["origin", "msg_id", "accepted", "status", "path"]
    with open(out / "hops_histogram.csv") as f:
        assert [(int(r["hops"]), int(r["messages"])) for r in csv.DictReader(f)] == [(0, 2), (1, 3), (2, 2), (3, 2)]
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["routing"]["forwarded_messages"] == 8 and on_disk["messages"]["expired"] == 3
    html = (out / "index.html").read_text()
    assert "Routing" in html and "<td>expired (hop limit)</td><td class=num>2</td>" in html


@pytest.mark.slow  # over 30 s on 2 cores: in ./dev test -m slow, not the default run
@pytest.mark.timeout(240)
def test_routing_figures_from_parquet_old_and_new(spark, tmp_path):
    """Compacted Parquet keeps hops, reason and notice; Parquet compacted before they were read
    (no such columns) still analyses, every routed arrival then counting as one line."""
    from pyspark.sql import functions as F

    from mccs.analytics.spark import compact
    roots = chain_traces().write(tmp_path / "traces")
    compact(spark, roots, str(tmp_path / "parquet"))
    summary = run_analysis([str(tmp_path / "parquet")], spark=spark)
    assert summary["input"]["format"] == "parquet"
    _check(summary)
    old = spark.read.parquet(str(tmp_path / "parquet")).drop("hops", "via", "reason", "notice")
    old.write.partitionBy("host", "date").parquet(str(tmp_path / "old"))
    summary = run_analysis([str(tmp_path / "old")], spark=spark)
    assert summary["routing"]["hops"] == [{"hops": 0, "messages": 2}, {"hops": 1, "messages": 7}]
    assert summary["routing"]["forwarded_events"] == 19
    assert summary["messages"]["notices"]["accepted"] == 0
    assert summary["messages"]["expired_by_reason"] == {"hop limit": 0, "ttl": 0, "other": 3}
    assert old.filter(F.col("kind") == "expired").count() == 3


@pytest.mark.timeout(180)
def test_direct_traffic_crosses_one_line_and_lost_paths_end_at_origin(spark, tmp_path):
    """Generated traces of neighbours only (version-1 lines, MSG_IDs reused): each delivered
    message crossed one line (none when local), nothing forwarded or expired, and the path of a
    lost message is its origin alone; that of a received one its origin, then its destination."""
    from mccs.testbed.tracegen import generate
    answers = generate(tmp_path / "traces", hosts=4, messages=600, id_space=100, lost=4, pending=3, duplicated=2)
    summary = run_analysis([str(tmp_path / "traces")], out=str(tmp_path / "report"), spark=spark)
    events = []
    for name in answers["files"]:
        with (gzip.open(name, "rt") if name.endswith(".gz") else open(name)) as f:
            events += [json.loads(line) for line in f]
    events = [e for e in events if isinstance(e, dict) and e.get("type") == "msg"]
    delivered, received = Counter(), Counter()      # by lines crossed; each `accepted` opens a message
    current: dict[tuple, dict] = {}
    for e in sorted(events, key=lambda e: (e["ts"], e["kind"] != "accepted")):
        key = (e["origin"], e["msg_id"])
        if e["kind"] == "accepted":
            current[key] = {"lines": 0 if e["to_id"][:2] == e["origin"] else 1}
        elif e["kind"] in ("received", "delivered") and key in current and e["kind"] not in current[key]:
            current[key][e["kind"]] = True
            (received if e["kind"] == "received" else delivered)[current[key]["lines"]] += 1
    assert summary["routing"]["hops"] == [{"hops": h, "messages": delivered[h]} for h in (0, 1)]
    assert delivered[0] > 0 and delivered[1] > 0
    assert (summary["routing"]["forwarded_events"], summary["messages"]["expired"]) == (0, 0)
    assert summary["messages"]["latency_received"]["count"] == received[0] + received[1]
    assert summary["routing"]["latency_per_hop"]["count"] == received[1]
    with open(tmp_path / "report" / "message_problems.csv") as f:
        rows = list(csv.DictReader(f))
    assert Counter(r["status"] for r in rows) == {"lost": 4, "pending": 3, "duplicated": 2}
    for r in rows:
        hosts = r["path"].split(">")
        assert hosts[0] == r["origin"] and len(hosts) <= 2, r
        assert r["status"] != "lost" or len(hosts) == 1, r


@pytest.mark.slow  # over 30 s on 2 cores: in ./dev test -m slow, not the default run
@pytest.mark.timeout(180)
def test_percentiles_from_brackets_are_sparks_exact_ones(spark, monkeypatch, tmp_path):
    """Above EXACT_UP_TO messages the percentiles come from approximate brackets and the values
    inside them: bit for bit what Spark's exact `percentile` gives, ties and nulls included."""
    import random

    from pyspark.sql import functions as F

    from mccs.analytics import spark as job
    rnd = random.Random(11)
    rows = [(T + rnd.random() * 50 - T, rnd.choice([0.25, 0.5, 1.0, None]), None) for _ in range(30_000)]
    df = spark.createDataFrame(rows, "a double, b double, c double")
    names = ("a", "b", "c")
    s = df.agg(*[F.count(n).alias(f"{n}_count") for n in names], *[job._brackets(n) for n in names]).first()
    got = job._percentiles(df, s, names, strict=True)
    pct = ", ".join(str(p) for p in job.PERCENTILES)
    want = df.agg(*[F.expr(f"percentile({n}, array({pct}))") for n in names]).first()
    assert got["a"] == want[0] and got["b"] == want[1] and got["c"] == [None, None, None]
    assert len(set(got["a"])) == 3 and got["b"] == [0.5, 1.0, 1.0]
    # and the whole analysis takes the same way: the same figures to the bit
    roots = chain_traces().write(tmp_path / "traces")
    exact = run_analysis(roots, spark=spark)
    monkeypatch.setattr(job, "EXACT_UP_TO", 0)
    bracketed = run_analysis(roots, spark=spark)
    for key in ("latency", "latency_received"):
        assert bracketed["messages"][key] == exact["messages"][key]
    assert bracketed["routing"]["latency_per_hop"] == exact["routing"]["latency_per_hop"]
