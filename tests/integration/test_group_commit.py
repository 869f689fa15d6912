"""Group commit in the daemon's shell: a pass waits, up to GATHER_WAIT, for the processes the
last commit answered, so that their next requests share one commit (issue 15, BENCHMARKS.md).

The daemon here is the real one (its core, its SQLite checkpoint, its event loop); only the
socket is left out: each process is a stand-in that hands the daemon its requests, as
server.Connection does, and keeps the replies. `mccs bench local` measures the same with real
processes on the real socket (about 4 messages a commit with 4 + 4 processes, 2.4 without)."""
from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from mccs.daemon import shell as daemon_module
from mccs.config import load
from mccs.daemon.shell import Daemon
from mccs.testbed.hosts import write_config

pytestmark = pytest.mark.timeout(60)

_conn_ids = itertools.count(1)


class Process:
    """A process on the daemon's socket, as the daemon sees one."""

    def __init__(self, d: Daemon, name: str):
        self.d, self.id, self.creds, self.binary, self.replies = d, next(_conn_ids), None, False, []
        d.connected(self)
        d.request(self, {"op": "hello", "name": name, "id": 0})

    def answer(self, body: dict, pieces=()) -> None:
        self.replies.append(body)

    def send(self, rid: int) -> None:
        self.d.request(self, {"op": "send", "to": "AAR", "data": "eA==", "id": rid})

    def answered(self, rid: int) -> bool:
        return any(r.get("id") == rid and r.get("ok") for r in self.replies)


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _run(tmp_path, scenario, gather_wait: float, monkeypatch) -> None:
    monkeypatch.setattr(daemon_module, "GATHER_WAIT", gather_wait)
    d = Daemon(load(write_config(tmp_path, "AA")))
    d.initialize()

    async def main():
        d.loop = asyncio.get_running_loop()
        a, b = Process(d, "A"), Process(d, "B")
        a.send(1)
        b.send(1)
        await _turns()  # one pass stores both and answers both: both are expected back
        assert a.answered(1) and b.answered(1)
        await scenario(d, a, b, d.cp.commits)

    try:
        asyncio.run(main())
    finally:
        d.trace.close()
        d.cp.close()


def test_a_pass_waits_for_the_processes_its_commit_answered(tmp_path, monkeypatch):
    async def scenario(d, a, b, commits):
        a.send(2)
        await _turns(20)  # without the wait, the pass would run within two turns of the loop
        assert d.cp.commits == commits and not a.answered(2)
        b.send(2)  # the last one expected: the pass runs at once, both in one commit
        await _turns()
        assert d.cp.commits == commits + 1 and a.answered(2) and b.answered(2)

    _run(tmp_path, scenario, gather_wait=60.0, monkeypatch=monkeypatch)


def test_a_process_that_does_not_ask_again_delays_a_pass_by_gather_wait_at_most(tmp_path, monkeypatch):
    async def scenario(d, a, b, commits):
        a.send(2)  # B has its reply and goes quiet
        await asyncio.sleep(0.3)
        assert d.cp.commits == commits + 1 and a.answered(2)
        a.send(3)  # the last commit answered A alone: no wait
        await _turns()
        assert d.cp.commits == commits + 2 and a.answered(3)

    _run(tmp_path, scenario, gather_wait=0.05, monkeypatch=monkeypatch)


def test_anything_else_to_do_ends_the_wait(tmp_path, monkeypatch):
    async def scenario(d, a, b, commits):
        a.send(2)
        await _turns()
        d.wake()  # line data, a timer, a process gone: the pass runs now
        await _turns()
        assert d.cp.commits == commits + 1 and a.answered(2)

    _run(tmp_path, scenario, gather_wait=60.0, monkeypatch=monkeypatch)


class _Transport:
    def __init__(self):
        self.aborted = 0

    def abort(self) -> None:
        self.aborted += 1


def test_passes_failing_on_a_full_disk_are_logged_once_every_probe(tmp_path, monkeypatch, caplog):
    """A commit that fails for want of room rolls the pass back and drops the clients, which ask
    again at once and may fail the same way: an adversarial test saw 365,000 log lines in 40 s
    (100 MB of log) with disk_reserve = 0. Said once every FULL_PROBE seconds now, with a count."""
    from checkpoint.store import CheckpointFull
    d = Daemon(load(write_config(tmp_path, "AA")))
    d.initialize()
    apply, is_full = d.cp.apply, [False]

    def full(changes):
        if changes and is_full[0]:
            raise CheckpointFull("database or disk is full")
        apply(changes)
    monkeypatch.setattr(d.cp, "apply", full)
    recoveries, recover = [], d._recover
    monkeypatch.setattr(d, "_recover", lambda why, disk_full: (recoveries.append((why, time.monotonic())),
                                                               recover(why, disk_full)))

    async def main():
        d.loop = asyncio.get_running_loop()
        Process(d, "S").send(1)  # a message for R, stored while there is room
        await asyncio.sleep(0.005)
        is_full[0] = True
        for rid in range(1, 201):  # a receiver dropped by each failure, asking again at once
            r = Process(d, "R")
            r.transport = _Transport()
            d.request(r, {"op": "recv", "wait": False, "id": 0})
            await asyncio.sleep(0.005)
            handed = next(m["msg"]["rid"] for m in r.replies if m.get("msg"))
            d.request(r, {"op": "confirm", "rid": handed, "id": rid})  # its commit fails: the disk is full
            await asyncio.sleep(0.005)
    asyncio.run(main())
    said = [r for r in caplog.records if "rolled back" in r.getMessage()]
    # the 200 failures take 2 s or so, longer on a loaded machine: said at the first, then at most
    # once every FULL_PROBE seconds of the time they took
    took = recoveries[-1][1] - recoveries[0][1]
    assert len(recoveries) == 200 and 1 <= len(said) <= 1 + took // daemon_module.FULL_PROBE
