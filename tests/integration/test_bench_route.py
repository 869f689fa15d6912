"""`mccs bench route` (issue 11): its help, and a tiny run of the chain against one line."""
from __future__ import annotations

import json
import subprocess

import pytest

from mccs.testbed.hosts import mccs_cli


def bench_route(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return mccs_cli("bench", "route", *args, timeout=timeout)


@pytest.mark.timeout(30)
def test_help_explains_the_three_measurements():
    p = bench_route("--help", timeout=25)
    assert p.returncode == 0
    for words in ("AA-BB-CC-DD", "per hop", "keep-alive", "--reroute-runs"):
        assert words in p.stdout


@pytest.mark.timeout(90)
def test_a_tiny_run_measures_the_chain_against_one_line():
    # Targets may be missed on a busy machine with so few messages: exit 0 or 1, but figures that make sense.
    p = bench_route("--runs", "1", "--messages", "12", "--latency-messages", "3", "--interval", "0.3",
                    "--reroute-runs", "0", "--json", timeout=85)
    assert p.returncode in (0, 1), p.stderr
    r = json.loads(p.stdout[p.stdout.index("{"):])
    capacity = r["baud"] / 10
    for path in ("single", "chain"):
        m = r["medians"][path]
        assert 0.5 * capacity < m["goodput"] < capacity
        assert m["latency"] > r["frame_ms"]  # a message cannot beat its frame
    assert r["medians"]["chain"]["latency"] > 2 * r["frame_ms"]  # three hops, stored at each
    assert r["met"]["reroute"] is None and r["reroute"] == []
