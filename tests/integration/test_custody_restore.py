"""End-to-end custody on real daemons (issue 32 item 3): a chain AA-BB-CC under traffic from AA to
CC, `mccs checkpoint backup` of one host, its disk lost, the backup put back. Every message
accepted is delivered to CC's process exactly once, and nothing is left held, with every default
but the test lines' timers."""
from __future__ import annotations

import collections
import contextlib
import shutil
import threading
import time

import pytest

import mccs
from mccs.testbed.hosts import DaemonProcess, mccs_cli, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.vserial import Lines

pytestmark = pytest.mark.timeout(240)

BAUD = 19200


class Chain:
    def __init__(self, tmp_path, vl):
        keys = {"protocol": "async", "baud": BAUD, **timers(BAUD)}
        ends = {"AA": ["BB"], "BB": ["AA", "CC"], "CC": ["BB"]}
        self.tmp = tmp_path
        self.d = {h: DaemonProcess(write_config(tmp_path, h, [{"peer": p, "port": vl.port(h, p), **keys}
                                                             for p in peers]))
                  for h, peers in ends.items()}
        self.got: list[bytes] = []
        self.sent: list[bytes] = []

    def send(self, n: int, pause: float = 0.005) -> None:
        with mccs.connect(self.d["AA"].config, "S") as s:
            for _ in range(n):
                data = b"m%04d" % len(self.sent)
                s.send("CCR", data)
                self.sent.append(data)
                time.sleep(pause)

    def take(self, quiet: float, most: int | None = None) -> None:
        """What comes to CC's process R until none has come for `quiet` seconds (or `most` of them)."""
        with mccs.connect(self.d["CC"].config, "R") as r:
            while most is None or most > 0:
                m = r.recv(timeout=quiet)
                if m is None:
                    return
                self.got.append(m.data)
                most = None if most is None else most - 1

    def backup(self, host: str) -> None:
        run = mccs_cli("checkpoint", "backup", "-c", str(self.d[host].config), str(self.tmp / f"{host}.backup"),
                       timeout=60)
        assert run.returncode == 0, run.stderr

    def restore(self, host: str) -> None:
        """kill -9 (the disk is lost), the backup put in place, the daemon started on it."""
        self.d[host].kill()
        for path in self.tmp.glob(f"{host}.db*"):
            if path.name != f"{host}.db.lock":
                path.unlink()
        shutil.copy(self.tmp / f"{host}.backup", self.tmp / f"{host}.db")
        self.d[host].start()

    def counter(self, host: str, name: str) -> int:
        with mccs.connect(self.d[host].config, "Q") as q:
            return q.status()["counters"].get(name, 0)

    def check(self, deadline: float) -> None:
        end = time.monotonic() + deadline
        while time.monotonic() < end and len(set(self.got)) < len(self.sent):
            self.take(quiet=5.0)
        twice = [t for t, n in collections.Counter(self.got).items() if n > 1]
        assert not twice, f"{len(twice)} delivered twice: {twice[:5]}"
        assert sorted(self.got) == self.sent, f"{len(set(self.sent) - set(self.got))} never delivered"
        for host, d in self.d.items():  # (a probe may take PROBE_FIRST to come)
            with mccs.connect(d.config, "Q") as q:
                while (st := q.status())["held_for_order"] or st["custody"]["syncing"] or st["custody"]["syncing_to"]:
                    assert time.monotonic() < end + 60, (host, st["held_for_order"], st["custody"], st["counters"])
                    time.sleep(1)


@pytest.fixture
def chain(tmp_path):
    with Lines(str(tmp_path / "dev"), ["AA-BB", "BB-CC"], baud=BAUD) as vl:
        c = Chain(tmp_path, vl)
        c.vl = vl
        for d in c.d.values():
            d.start()
        try:
            yield c
        finally:
            for d in c.d.values():
                d.stop()


def _established(c: Chain) -> None:
    """The routes learned, a few messages there and taken: CC's first state begins custody at AA."""
    deadline = time.monotonic() + 30
    with mccs.connect(c.d["AA"].config, "S") as s:
        while True:  # (unknown until AA learns the route; then CC's daemon answers)
            with contextlib.suppress(mccs.Refused):
                if s.ping("CC"):
                    break
            assert time.monotonic() < deadline, "AA never reached CC"
            time.sleep(0.5)
    c.send(5)
    c.take(quiet=3.0)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with mccs.connect(c.d["AA"].config, "Q") as q:
            if q.status()["counters"].get("custody_begun"):
                return
        time.sleep(0.5)
    raise AssertionError("custody never began")


@pytest.mark.slow  # over 30 s on 2 cores: in ./dev test -m slow, not the default run
def test_a_destination_restored_from_a_backup_under_traffic_delivers_each_message_once(chain):
    _established(chain)
    sender = threading.Thread(target=chain.send, args=(120, 0.02))
    sender.start()
    chain.take(quiet=3.0, most=30)
    chain.backup("CC")  # while messages are being sent, received and taken
    chain.take(quiet=3.0, most=40)  # taken after the backup: the restored CC must not hand them again
    sender.join(120)
    chain.take(quiet=1.0, most=20)  # and some still wait on CC's RECV_LIST: lost with its disk, sent again
    time.sleep(12)  # (what CC's process took is told to AA within STATE_WAIT)
    chain.restore("CC")
    chain.check(deadline=120)
    assert chain.counter("CC", "custody_taken_before") > 0  # some the backup held were taken since: dropped


def test_a_transit_host_restored_from_a_backup_loses_nothing(chain):
    _established(chain)
    chain.vl.lines["BB-CC"].disconnect()  # messages pile up at BB
    chain.send(10)
    chain.backup("BB")
    chain.send(15)  # BB acknowledges these after the backup: lost with its disk
    time.sleep(3)
    chain.restore("BB")
    chain.vl.lines["BB-CC"].reconnect()
    chain.check(deadline=150)  # BB's new epoch makes AA probe at once: the gap is sent again
    assert chain.counter("AA", "custody_resent") >= 15  # those BB had acknowledged after its backup


@pytest.mark.slow  # over 30 s on 2 cores: in ./dev test -m slow, not the default run
def test_an_origin_restored_from_a_backup_under_traffic_delivers_each_message_once(chain):
    _established(chain)
    chain.send(20)
    _left(chain, "AA")  # numbered as they left AA: the backup holds them as copies
    chain.vl.lines["AA-BB"].disconnect()
    chain.send(30)  # two windows' worth numbered as they left AA, not acknowledged; the rest not numbered yet
    time.sleep(2)
    chain.backup("AA")
    chain.vl.lines["AA-BB"].reconnect()
    sender = threading.Thread(target=chain.send, args=(40, 0.02))  # accepted after the backup
    sender.start()
    chain.take(quiet=3.0, most=30)  # the backup's 20 among them: AA restored must not have them come again
    sender.join(120)
    _left(chain, "AA")  # (what had not would be lost with AA's disk)
    chain.take(quiet=3.0, most=20)  # the rest wait on CC's RECV_LIST
    chain.restore("AA")
    chain.send(30)  # new ones, given again the MSG_IDs the lost disk had given
    chain.check(deadline=150)
    assert chain.counter("AA", "custody_synced") >= 1
    assert chain.counter("AA", "custody_doubts_had") >= 1  # numbered after the backup by the lost disk, delivered


def _left(c: Chain, host: str) -> None:
    """Until nothing waits on the host's SEND_LIST (daemon messages aside, which come and go)."""
    deadline = time.monotonic() + 60
    with mccs.connect(c.d[host].config, "Q") as q:
        while q.status()["lists"]["send"]:
            assert time.monotonic() < deadline, q.status()["lists"]
            time.sleep(0.5)
