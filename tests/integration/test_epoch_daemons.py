"""The checkpoint epoch in the sign-on (issue 13), between real daemon processes over a vserial
line: a host whose checkpoint was deleted is heard at once with its old MSG_IDs."""
from __future__ import annotations

import time

import pytest

import mccs
from mccs.testbed.hosts import DaemonProcess, mccs_cli, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.vserial import Lines

pytestmark = pytest.mark.timeout(120)


# -- real daemons ---------------------------------------------------------------------------------------
def _recv_all(client, n: int, seconds: float) -> list:
    """Up to `n` messages, all within `seconds`."""
    deadline, got = time.monotonic() + seconds, []
    while len(got) < n and (left := deadline - time.monotonic()) > 0:
        m = client.recv(timeout=left)
        if m is not None:
            got.append(m)
    return got


@pytest.mark.timeout(150)
@pytest.mark.parametrize("protocol", ["async", "bsc"])
def test_daemons_a_host_whose_checkpoint_was_deleted_is_heard_at_once(tmp_path, protocol):
    """AA and BB as daemon processes over a vserial line. AA's checkpoint is deleted and AA
    started with --new-checkpoint: its next messages have the MSG_IDs BB already holds in its
    duplicate window, and BB delivers them at once; BB's messages reach the new AA too."""
    baud = 115200
    keys = {"protocol": protocol, "baud": baud, **timers(baud)}
    with Lines(str(tmp_path / "dev"), ["AA-BB"], baud=baud) as vl:
        a = DaemonProcess(write_config(tmp_path, "AA", [{"peer": "BB", "port": vl.port("AA", "BB"),
                                                          "role": "primary", **keys}]))
        b = DaemonProcess(write_config(tmp_path, "BB", [{"peer": "AA", "port": vl.port("BB", "AA"),
                                                          "role": "secondary", **keys}]))
        try:
            a.start(), b.start()
            with mccs.connect(a.config, "S") as s, mccs.connect(b.config, "R") as r:
                old_ids = [s.send("BBR", b"old %d" % i) for i in range(5)]
                assert [r.recv(timeout=30).msg_id for _ in old_ids] == old_ids
                old_epoch = s.status()["epoch"]
            assert a.stop() == 0
            for path in tmp_path.glob("AA.db*"):
                if not path.name.endswith(".lock"):
                    path.unlink()  # the disk is lost; the operator starts the host empty on purpose
            a.start(args=("--new-checkpoint",))
            with mccs.connect(a.config, "S") as s, mccs.connect(b.config, "R") as r:
                assert s.status()["epoch"] != old_epoch
                new_ids = [s.send("BBR", b"new %d" % i) for i in range(5)]
                assert new_ids == old_ids  # MSG_IDs from 1 again
                # never, were they taken for duplicates; a BSC sign-on after the restart once took
                # over 15 s with the suite in parallel on 2 cores
                got = _recv_all(r, len(new_ids), seconds=40)
                assert [m.data for m in got] == [b"new %d" % i for i in range(5)]
                line = r.status()["lines"][0]
                assert line["peer_epoch"] == s.status()["epoch"] and line["counters"]["peer_renewed"] == 1
                r.send("AAS", b"hello, new AA")
                assert s.recv(timeout=30).data == b"hello, new AA"
                shown = mccs_cli("status", "-c", str(b.config), timeout=30).stdout
                assert f"peer_epoch {s.status()['epoch']}" in shown
        finally:
            a.stop()
            b.stop()
