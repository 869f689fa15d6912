"""The trace writer: schema, rotation, msg events before replies, a broken trace_dir never fatal."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import mccs
from mccs.core.effects import TraceEvent
from mccs.daemon.trace import TraceWriter
from mccs.testbed.hosts import DaemonProcess, write_config

pytestmark = pytest.mark.timeout(60)


def _events(directory) -> list[dict]:
    return [json.loads(line) for p in sorted(Path(directory).glob("*.jsonl")) for line in p.read_text().splitlines()]


def test_schema_and_rotation(tmp_path):
    t = TraceWriter(tmp_path, "AA", max_bytes=4096)
    for i in range(100):
        t.write(TraceEvent("frame", "D", "BB", "async", dict(dir="tx", bytes=150, ok=True, seq=i % 256, origin="AA",
                                                             msg_id=i, retransmit=(i % 7 == 0) or None)))
        t.write(TraceEvent("msg", "accepted", fields=dict(origin="AA", msg_id=i, from_id="AAP   ", to_id="BBQ   ",
                                                          user_id=i)))
        t.flush()
    t.write(TraceEvent("line", "up", "BB", "async", {"baud": 9600}))
    t.close()
    files = sorted(tmp_path.glob("AA-*.jsonl"))
    assert len(files) > 3 and all(f.stat().st_size <= 4096 + 1024 for f in files)
    events = _events(tmp_path)
    assert len(events) == 201
    frame = events[0]
    assert frame == {"v": 1, "ts": frame["ts"], "host": "AA", "line": "BB", "proto": "async", "type": "frame",
                     "dir": "tx", "kind": "D", "bytes": 150, "ok": True, "seq": 0, "origin": "AA", "msg_id": 0,
                     "retransmit": True}
    assert events[1]["type"] == "msg" and events[1]["kind"] == "accepted" and "retransmit" not in events[3]
    assert events[-1]["kind"] == "up" and events[-1]["baud"] == 9600


def test_a_field_orjson_refuses_is_still_written(tmp_path):
    """A lone surrogate (bytes a process name decoded with surrogateescape) or an int beyond 64
    bits: the stdlib encoder writes it, escaped, on the same line as ever."""
    t = TraceWriter(tmp_path, "AA")
    t.write(TraceEvent("msg", "accepted", fields=dict(from_id="AAP\udcff  ", user_id=1 << 70, note="é")))
    t.write(TraceEvent("msg", "taken", fields=dict(from_id="AAP   ", user_id=7, note="é")))
    t.close()
    odd, plain = _events(tmp_path)
    assert odd["from_id"] == "AAP\udcff  " and odd["user_id"] == 1 << 70 and odd["note"] == "é"
    assert plain["kind"] == "taken" and plain["note"] == "é" and plain["user_id"] == 7


def test_msg_events_precede_replies_so_kill9_loses_none(tmp_path):
    d = DaemonProcess(write_config(tmp_path, "AA", [])).start()
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R") as r:
        ids = [s.send("AAR", b"x") for _ in range(20)]
        got = [r.recv().msg_id for _ in range(10)]
    d.kill()
    events = _events(d.cfg.trace_dir)
    kinds = {(e["kind"], e["msg_id"]) for e in events if e["type"] == "msg"}
    assert all(("accepted", i) in kinds and ("received", i) in kinds for i in ids)
    assert all(("delivered", i) in kinds for i in got)


def test_unwritable_trace_dir_is_not_fatal(tmp_path):
    (tmp_path / "blocked").write_text("a file where the trace directory should be")
    d = DaemonProcess(write_config(tmp_path, "AA", [], trace_dir="blocked/AA")).start()
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R") as r:
        s.send("AAR", b"traces or not")
        assert r.recv().data == b"traces or not"
        assert s.status()["counters"]["trace_errors"] > 0
    assert d.stop() == 0


def test_corrupt_and_truncated_trace_files_do_not_stop_a_daemon(tmp_path):
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    old = trace_dir / "AA-20260101T000000-1-001.jsonl"
    old.write_bytes(b'{"v": 1, "ts": 1.0, "host": "AA", "type": "msg", "ki\x00\xff garbage')  # cut mid-line
    d = DaemonProcess(write_config(tmp_path, "AA", [], trace_dir="trace")).start()
    with mccs.connect(d.config, "S") as s, mccs.connect(d.config, "R") as r:
        msg_id = s.send("AAR", b"still traced")
        assert r.recv().msg_id == msg_id
        assert s.status()["counters"]["trace_errors"] == 0
    assert d.stop() == 0
    assert old.read_bytes().endswith(b"garbage")  # never appended to nor rewritten
    new = [p for p in trace_dir.glob("AA-*.jsonl") if p != old]
    events = [json.loads(line) for p in new for line in p.read_text().splitlines()]
    assert ("delivered", msg_id) in {(e["kind"], e.get("msg_id")) for e in events}
