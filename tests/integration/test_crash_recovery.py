"""kill -9 the daemon at many random moments while processes send and receive: no message
whose MSG_ID was returned is lost, none is returned twice to a live process, order holds."""
from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mccs.testbed.hosts import DaemonProcess, write_config

WORKER = str(Path(__file__).with_name("crash_worker.py"))


def _worker(mode, config, name, log, peer, count):
    return subprocess.Popen([sys.executable, WORKER, mode, str(config), name, str(log), peer, str(count)])


def _log(path: Path) -> list[tuple[int, str]]:
    if not path.exists():
        return []
    return [(int(a), b) for a, b in (line.split() for line in path.read_text().splitlines())]


@pytest.mark.slow  # over 25 s on 2 cores: in ./dev test -m slow, not the default run
@pytest.mark.timeout(240)
def test_kill9_during_traffic_loses_and_duplicates_nothing(tmp_path):
    rng = random.Random(20261122)
    config = write_config(tmp_path, "AA", [])
    daemon = DaemonProcess(config).start()
    per_sender, senders, receivers = 2000, ["S1", "S2", "S3", "S4"], ["R1", "R2"]
    expect = {r: per_sender * sum(1 for i, _ in enumerate(senders) if receivers[i % 2] == r) for r in receivers}
    procs = [_worker("send", config, s, tmp_path / f"{s}.log", "AA" + receivers[i % 2], per_sender)
             for i, s in enumerate(senders)]
    procs += [_worker("recv", config, r, tmp_path / f"{r}.log", "-", expect[r]) for r in receivers]
    kills = 0
    try:
        while kills < 22 and any(p.poll() is None for p in procs):
            time.sleep(rng.uniform(0.02, 0.35))
            daemon.kill()
            kills += 1
            daemon.start()
        for p in procs:
            assert p.wait(120) == 0
    finally:
        for p in procs:
            p.kill()
        daemon.stop()
    assert kills >= 20
    sent = {s: _log(tmp_path / f"{s}.log") for s in senders}
    got = {r: _log(tmp_path / f"{r}.log") for r in receivers}
    for i, s in enumerate(senders):
        assert [text for _, text in sent[s]] == [f"{s}:{k}" for k in range(per_sender)]
    all_ids = [msg_id for s in senders for msg_id, _ in sent[s]]
    assert len(set(all_ids)) == len(all_ids), "a MSG_ID was given twice"
    for i, s in enumerate(senders):
        r = receivers[i % 2]
        mine = [text for _, text in got[r] if text.startswith(s + ":")]
        assert mine == [f"{s}:{k}" for k in range(per_sender)], f"{s}->{r}: lost, duplicated or out of order"
        assert {msg_id for msg_id, text in got[r] if text.startswith(s + ":")} == {m for m, _ in sent[s]}
