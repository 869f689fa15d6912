"""The README's demo: its routing story from traces, and a short real run without Spark."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mccs.testbed.demo import routing_story


def _trace(path, *events):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for ts, host, fields in events:
            f.write(json.dumps({"v": 1, "ts": ts, "host": host, **fields}) + "\n")


@pytest.mark.timeout(30)
def test_the_routing_story_names_a_two_hop_path_and_a_route_that_moved(tmp_path):
    msg = {"type": "msg", "origin": "BB", "msg_id": 3, "from_id": "BBS1  ", "to_id": "DDR0  "}
    _trace(tmp_path / "BB" / "BB-1.jsonl",
           (1.0, "BB", {"type": "line", "kind": "route", "line": "CC", "to": "DD", "distance": 2}),
           (2.0, "BB", {**msg, "kind": "accepted"}),
           (5.0, "BB", {"type": "line", "kind": "route", "line": "EE", "to": "DD", "distance": 2}),
           (6.0, "BB", {"type": "line", "kind": "route", "line": "EE", "to": "DD", "distance": None}))
    _trace(tmp_path / "CC" / "CC-1.jsonl", (2.5, "CC", {**msg, "kind": "forwarded", "hops": 1}))
    _trace(tmp_path / "DD" / "DD-1.jsonl", (3.0, "DD", {**msg, "kind": "received", "hops": 2}),
           (3.1, "DD", {**msg, "msg_id": 4, "origin": "CC", "kind": "received", "hops": 1}))
    story = routing_story([str(tmp_path / h) for h in ("BB", "CC", "DD")])
    assert story["hops"] == {1: 1, 2: 1}
    assert story["example"] == ("BBS1", "DDR0", 3, "BB > CC > DD")
    assert story["moved"] == [("BB", "DD", "CC", "EE", 2)]


@pytest.mark.timeout(240)
def test_the_demo_runs_to_a_pass_and_tells_what_routing_did(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mccs.cli", "demo", "--no-analyze", "--messages", "150",
                          "--dir", str(tmp_path / "demo")], capture_output=True, text=True, timeout=230)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "VERDICT                   PASS" in out.stdout
    assert "2 lines:" in out.stdout and "was stored at" in out.stdout
