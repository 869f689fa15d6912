"""`mccs bench scale` (issue 38): the in-memory network of daemon cores, run as the bench runs it."""
import argparse
import json
import subprocess
import sys

import pytest

from mccs.testbed import bench_scale


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench_scale.add_arguments(p)
    return p.parse_args(argv)


@pytest.mark.parametrize("shape, lines", [("ring", 8), ("tree", 7), ("grid", 10), ("mesh", 12)])
def test_the_shapes_have_the_lines_they_should(shape, lines):
    import random
    ids = bench_scale.host_ids(8)
    edges = bench_scale.topology(shape, ids, random.Random(1))
    assert len(edges) == lines and all(a != b for a, b in edges)
    reach, todo = {ids[0]}, [ids[0]]  # every shape is connected
    while todo:
        at = todo.pop()
        for a, b in edges:
            for x, y in ((a, b), (b, a)):
                if x == at and y not in reach:
                    reach.add(y)
                    todo.append(y)
    assert reach == set(ids)


@pytest.mark.timeout(120)
def test_a_ring_with_a_cut_and_a_kill_converges_and_carries_every_message_once_in_order():
    out = bench_scale.measure(_args("--hosts", "8", "--shape", "ring", "--duration", "240", "--cuts", "1",
                                    "--kills", "1", "--pairs", "12", "--rate", "2"))
    m = out["messages"]
    assert m["accepted"] > 300 and (m["delivered"], m["waiting"], m["returned"], m["lost"], m["duplicated"],
                                    m["reordered"]) == (m["accepted"], 0, 0, 0, 0, 0), out
    events = [c["event"].split()[0] for c in out["converged"]]
    assert events[0] == "start" and sorted(events[1:]) == ["cut", "heal", "kill", "revive"]
    assert all(c["seconds"] is not None and c["seconds"] < 60 for c in out["converged"]), out["converged"]
    assert 0 < out["routing_bytes"]["mean"] <= out["routing_bytes"]["max"]
    assert 0 < out["routing_bytes"]["max_share"] < 0.05
    passes = out["passes"]  # each host has something to do a few times a second at most: none spins
    assert 0 < passes["per_host_second"] < 5 and 0 < passes["busiest_second"] < 200, passes
    # The bench runs with the cyclic collector off: the killed host's kernel is its only garbage in
    # cycles (a few hundred objects); a cycle a pass would leave thousands.
    assert 0 < out["garbage_objects"] < 2_000 < passes["total"], out["garbage_objects"]


@pytest.mark.timeout(120)
def test_a_ring_wider_than_15_lines_converges_and_carries():
    """Diameter 20: what version 1's distance vector, whose 16 is "no route", never learned."""
    out = bench_scale.measure(_args("--hosts", "40", "--shape", "ring", "--duration", "30", "--cuts", "0",
                                    "--kills", "0", "--pairs", "4", "--rate", "1"))
    m = out["messages"]
    assert out["converged"][0]["seconds"] is not None and out["converged"][0]["seconds"] < 60, out["converged"]
    assert m["accepted"] > 10 and (m["delivered"], m["lost"], m["duplicated"]) == (m["accepted"], 0, 0), m


@pytest.mark.timeout(60)
def test_the_command_prints_a_table_json_and_its_targets_plots_and_refuses_a_bad_size(tmp_path):
    run = [sys.executable, "-m", "mccs.cli", "bench", "scale", "--hosts", "4", "--shape", "tree", "--duration", "20",
           "--cuts", "0", "--kills", "0", "--pairs", "3"]
    table = subprocess.run(run, capture_output=True, text=True, timeout=50)
    assert table.returncode == 0 and "routes converged" in table.stdout and "delivered once" in table.stdout
    assert "converged: met  routing: met  exactly once: met  wall: -" in table.stdout  # (wall: for 1,000 hosts)
    figures = json.loads(subprocess.run(run + ["--json"], capture_output=True, text=True, timeout=50).stdout)
    assert figures["hosts"] == 4 and figures["lines"] == 3 and figures["messages"]["lost"] == 0
    assert figures["targets"] == {"converged": True, "routing": True, "exactly_once": True, "wall": None}
    (tmp_path / "runs.json").write_text(json.dumps([figures, {**figures, "hosts": 8}]))
    drawn = subprocess.run(run[:5] + ["--plot", str(tmp_path / "p.png"), "--from", str(tmp_path / "runs.json")],
                           capture_output=True, text=True, timeout=50)
    assert drawn.returncode == 0 and (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG", drawn.stderr
    bad = subprocess.run(run[:5] + ["--hosts", "1"], capture_output=True, text=True, timeout=50)
    assert bad.returncode == 2 and "--hosts must be" in bad.stderr


@pytest.mark.timeout(120)
def test_a_look_at_convergence_that_looks_only_at_what_moved_finds_what_a_whole_look_finds(tmp_path):
    """The bench's look (Scale.converged) keeps the destinations it found good until a route to
    them moves or an event comes. At every simulated second, through a cut, a heal, a kill, a
    revive, and then a host's lines failing without an event (its routes move; the look must see
    it), it says what a look at every destination says."""
    s = bench_scale.Scale(_args("--hosts", "12", "--shape", "mesh", "--seed", "3"), str(tmp_path))
    a, b = s.edges[0]
    hub = max(s.ids, key=lambda h: sum(h in e for e in s.edges))  # (routes go through it)
    events = [bench_scale.Event(20.0, "cut", line=(a, b)), bench_scale.Event(60.0, "heal", line=(a, b)),
              bench_scale.Event(90.0, "kill", host=hub), bench_scale.Event(150.0, "revive", host=hub)]
    said = []
    while s.net.now < 260.0:
        if events and events[0].at <= s.net.now:
            s.apply(events.pop(0))
        if 200.0 <= s.net.now < 201.0:  # (not an event: the look is not told)
            for x, y in s.edges:
                if s.ids[7 if hub != s.ids[7] else 8] in (x, y):
                    s.net.channel(x, y).disconnect()
        quick = s.converged()
        whole = bench_scale.Scale.converged(_fresh(s))
        assert quick == whole, f"t={s.net.now:.1f}: the quick look says {quick}, a whole look {whole}"
        said.append(quick)
        s.net.run(duration=1.0)
    assert said[199] and not said[-1]  # (converged, until the host's lines failed)


def _fresh(s: "bench_scale.Scale") -> "bench_scale.Scale":
    """The same network, looked at as if for the first time."""
    import copy
    whole = copy.copy(s)
    whole._good, whole._looked, whole._failing = set(), None, None
    return whole


@pytest.mark.timeout(120)
def test_a_run_repeats_itself_with_the_same_seed():
    """Every random choice of the simulated network comes from the seed: the line machines' sessions
    and nonces, and each checkpoint's epoch (an epoch drawn from secrets made runs differ)."""
    def run() -> dict:
        out = bench_scale.measure(_args("--hosts", "30", "--shape", "mesh", "--duration", "60", "--cuts", "1",
                                        "--kills", "1", "--pairs", "10", "--rate", "2"))
        return {k: out[k] for k in ("converged", "routing_bytes", "messages", "passes")}
    assert run() == run()
