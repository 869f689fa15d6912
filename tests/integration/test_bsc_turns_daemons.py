"""Two daemon processes on a BSC line at 9600 baud over real ptys, every default: the destination's
custody states wait for the sender to give the line up instead of asking for it by RVI
(mccs.core.lines, LOOSE_BYTES; the same on a virtual clock: tests/unit/test_bsc_turns.py)."""
from __future__ import annotations

import pytest

import mccs
from mccs.testbed.hosts import DaemonProcess, start_all, stop_all, wait_until, write_config
from mccs.testbed.vserial import Lines


@pytest.mark.timeout(120)
def test_a_burst_over_bsc_gets_its_custody_states_after_it_without_an_rvi(tmp_path):
    with Lines(str(tmp_path / "dev"), ["AA-BB"], baud=9600) as vl:
        daemons = [DaemonProcess(write_config(tmp_path, h, [{"peer": p, "port": vl.port(h, p), "protocol": "bsc",
                                                             "role": role}]))
                   for h, p, role in (("AA", "BB", "primary"), ("BB", "AA", "secondary"))]
        aa, bb = daemons
        try:
            start_all(daemons)
            texts = [b"%03d" % i + bytes(125) for i in range(30)]  # about 6 s of blocks at 9600 baud
            with mccs.connect(aa.config, "S") as s, mccs.connect(bb.config, "R") as r:
                s.send("BBR", b"first")  # taken: BB's first state begins custody at AA
                assert r.recv(timeout=30).data == b"first"
                wait_until(lambda: aa.counters().get("custody_begun"), 30, "custody to begin")
                s.send_many([("BBR", t) for t in texts])
                got = [r.recv(timeout=60) for _ in texts]
                assert [m.data for m in got if m is not None] == texts  # once each, in order
                wait_until(lambda: aa.counters().get("custody_released", 0) >= len(texts), 60,
                           "BB's state to reach AA, which drops its copies")
                assert sum(s.status()["custody"]["copies"].values()) == 0
                line = r.status()["lines"][0]
            assert line["counters"].get("rvis", 0) == 0, line["counters"]  # (it was 1 or 2 before LOOSE_BYTES)
        finally:
            stop_all(daemons)
