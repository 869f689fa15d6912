"""End-to-end custody (mccs.core.custody): restoring the destination, a transit host or the origin of
a 3-host chain from a backup taken under traffic loses nothing, delivers nothing twice and holds
nothing for good. In memory: the daemon's own core and checkpoint store, on simulated lines."""
from __future__ import annotations

import base64
import collections
import json
import sqlite3

import pytest

from checkpoint.changes import Kept
from checkpoint.store import SCHEMA_VERSION, Checkpoint
from mccs.cli.client import _print_status
from mccs.core import custody
from mccs.core.custody import parse_ranges, ranges
from mccs.core.envelope import NOTICE
from mccs.core.notices import DAEMON_ROOM
from mccs.testbed.hostsim import SimNet, line


def test_ranges_say_runs_as_long_as_they_fit():
    assert ranges([1, 2, 3, 5, 7, 8], 40) == ("1-3,5,7-8", None)
    assert ranges([], 10) == ("", None)
    text, cut = ranges(list(range(1, 200, 2)), 20)
    assert len(text) <= 20 and cut == 1 + 2 * len(text.split(","))  # the first number left out
    assert parse_ranges("1-3,5") == [(1, 3), (5, 5)]
    for bad in ("3-1", "0", "a", "1-b"):
        with pytest.raises(ValueError):
            parse_ranges(bad)


def _chain(tmp_path) -> SimNet:
    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA"), line("CC")], "CC": [line("BB")]})
    assert net.run(lambda: net["AA"].kernel.routes.next_hop("CC") == "BB", duration=30)
    return net


class Flow:
    """AA's process S sends numbered texts to CC's process R, which takes them as they come."""

    def __init__(self, net: SimNet):
        self.net, self.src, self.dst = net, net.client("AA", "S"), net.client("CC", "R")
        self.sent = 0
        self.got: list[bytes] = []
        self.ids: list[int] = []  # the MSG_IDs given, in order

    def send(self, n: int) -> None:
        for _ in range(n):
            self.ids.append(self.src.send("CCR", b"m%d" % self.sent)["msg_id"])
            self.sent += 1

    def take(self, n: int | None = None, timeout: float = 5.0) -> None:
        while n is None or n > 0:
            reply = self.dst.recv(timeout=timeout)
            if reply["msg"] is None:
                assert n is None, f"{n} more were expected"
                return
            self.got.append(base64.b64decode(reply["msg"]["data"]))
            n = None if n is None else n - 1

    def reconnect(self) -> None:
        self.dst = self.net.client("CC", "R")

    def check(self) -> None:
        """Every message delivered exactly once, and nothing left anywhere but daemon messages."""
        for _ in range(60):  # (a probe may take PROBE_FIRST to come)
            self.take(None, timeout=5.0)
            if _quiet(self.net):
                break
        twice = [t for t, n in collections.Counter(self.got).items() if n > 1]
        assert not twice, f"delivered twice: {twice}"
        assert sorted(self.got, key=lambda t: int(t[1:])) == [b"m%d" % i for i in range(self.sent)]
        assert _quiet(self.net)


def _quiet(net: SimNet) -> bool:
    """No user message on any list, held for order, or kept in custody."""
    for h in net.hosts.values():
        k = h.kernel
        if any(not b.flags & NOTICE for b in k.lists.send) or len(k.lists.recv):
            return False
        if any(p.held or p.syncing for p in k.pairs.into.pairs.values()):
            return False
        if any(not b.flags & NOTICE for c in k.custody.copies.values() for b in c.values()):
            return False
    return True


def _established(net: SimNet) -> bool:
    return ("CC", 0) in net["AA"].kernel.pairs.out.kept and net["CC"].kernel.pairs.into.pairs[("AA", 0)].custody


def _in_custody(tmp_path, first: int = 2) -> tuple[SimNet, Flow]:
    """The chain, with `first` messages sent and taken: CC's first state begins custody at AA."""
    net = _chain(tmp_path)
    flow = Flow(net)
    flow.send(first)
    flow.take(first)
    assert net.run(lambda: _established(net), duration=30)
    return net, flow


def test_the_origin_keeps_a_copy_until_the_destination_has_taken_it(tmp_path):
    net = _chain(tmp_path)
    flow = Flow(net)
    flow.send(3)
    flow.take(3)
    assert net.run(lambda: _established(net), duration=30)  # the destination's first state begins custody
    flow.send(5)
    assert net.run(lambda: len(net["CC"].kernel.lists.recv) == 5, duration=30)
    aa = net["AA"].kernel
    assert len(aa.custody.copies[("CC", 0)]) == 5 and aa.lists.send.kept == 5  # on CC, not taken: kept
    flow.take(2)
    assert net.run(lambda: len(aa.custody.copies.get(("CC", 0), {})) == 3, duration=30)  # the two taken go
    rows = net["AA"].cp.conn.execute("SELECT count(*) FROM send_list WHERE flags & 256").fetchone()[0]
    assert rows == 3  # the copies are the SEND_LIST rows, flagged
    flow.take(3)
    flow.check()


def test_every_custody_message_fits_the_room_every_line_takes():
    worst = {"state": "ffffffff", "p": 7, "e": "ffffffff", "x": 10 ** 9, "a": 1, "h": "", "y": 10 ** 12}
    r, _ = ranges(list(range(1, 10 ** 6, 2)), custody._room(worst, "r"))
    worst["r"] = r
    h, _ = ranges(list(range(2, 10 ** 6, 2)), custody._room(worst, "h"))
    worst["h"] = h
    assert len(json.dumps(worst, separators=(",", ":"))) <= DAEMON_ROOM
    probe = {"probe": "ffffffff", "p": 7, "e": "ffffffff", "f": 10 ** 9, "n": 10 ** 9,
             "u": ranges(list(range(1, 65536, 2)), custody.DOUBTS_ROOM)[0]}
    k, _ = ranges(list(range(1, 10 ** 6, 2)), custody._room(probe, "k"))
    assert len(json.dumps({**probe, "k": k}, separators=(",", ":"))) <= DAEMON_ROOM
    had: dict = {"had": "ffffffff", "p": 7, "z": 65536}
    had["d"], _ = ranges(list(range(1, 65536, 2)), custody._room(had, "d"))
    assert len(json.dumps(had, separators=(",", ":"))) <= DAEMON_ROOM and had["d"].startswith("1,3,5")


def test_a_destination_restored_from_a_backup_gets_again_what_it_lost_and_not_what_was_taken(tmp_path):
    net, flow = _in_custody(tmp_path, 4)
    flow.send(10)
    flow.take(4)  # 6 wait on CC's RECV_LIST
    backup = net["CC"].backup()
    flow.take(3)  # taken after the backup: must not come again
    flow.send(6)  # arrived after the backup: must come again
    flow.take(2)
    net.run(duration=15)  # (the states of what was taken reach AA: STATE_WAIT)
    net["CC"].restore(backup)
    flow.reconnect()
    assert net["CC"].kernel.pairs.into.pairs[("AA", 0)].syncing
    flow.check()
    assert net["CC"].kernel.counters["custody_taken_before"] == 5  # 3 + 2 taken since the backup, dropped
    assert net["AA"].kernel.counters["custody_resent"] >= 4  # the 4 that arrived after it and were not taken


def test_a_transit_host_restored_from_a_backup_loses_nothing(tmp_path):
    net, flow = _in_custody(tmp_path)
    net.channel("BB", "CC").disconnect()
    flow.send(3)
    assert net.run(lambda: len(net["BB"].kernel.lists.send) >= 3, duration=30)
    backup = net["BB"].backup()
    flow.send(4)  # BB acknowledges these after the backup: lost with its disk
    assert net.run(lambda: sum(not b.flags & NOTICE for b in net["BB"].kernel.lists.send) == 7, duration=30)
    net["BB"].restore(backup)
    net.channel("BB", "CC").reconnect()
    flow.check()
    assert net["AA"].kernel.counters["custody_resent"] >= 4  # found by the probe, sent again from AA


def test_an_origin_restored_from_a_backup_sends_again_under_the_same_numbers_and_delivers_nothing_twice(tmp_path):
    net, flow = _in_custody(tmp_path)
    net.channel("AA", "BB").disconnect()
    flow.send(4)  # numbered as they are handed to the line, the wire's lead apart: in the backup with their numbers
    aa = net["AA"].kernel
    assert net.run(lambda: [b.pseq for b in aa.lists.send if not b.flags & NOTICE] == [3, 4, 5, 6], duration=5)
    backup = net["AA"].backup()
    net.channel("AA", "BB").reconnect()
    flow.send(3)  # accepted after the backup: lost with AA's disk, but on their way before
    flow.take(5)  # 4 of the backup's and 1 after it taken at CC; 2 wait there
    net["AA"].restore(backup)
    aa = net["AA"].kernel
    assert aa.pairs.out.kept[("CC", 0)].syncing  # no new number before CC says how far it got
    assert aa.pairs.epoch_of("CC", 0) != aa.pairs.epoch  # the stream keeps the epoch it had
    flow.src = net.client("AA", "S")
    flow.send(3)  # new ones, given the MSG_IDs of the 3 lost with the disk again
    assert set(flow.ids[-3:]) & set(flow.ids[-6:-3])  # (CC still holds those ids in its duplicate window)
    flow.check()  # the backup's 4 sent again are known by their numbers at CC, the new ones are not
    assert aa.counters["custody_synced"] == 1
    assert [b.pseq for b in aa.lists.send] == [] and aa.pairs.out.next[("CC", 0)] > custody.JUMP


def test_a_schema_10_checkpoint_is_migrated_its_custody_streams_numbered_under_the_hosts_epoch(tmp_path):
    path = tmp_path / "AA.db"
    Checkpoint(path, "AA").close()
    conn = sqlite3.connect(path)  # back to version 10: custody_out without mine and syncing
    with conn:
        for column in ("mine", "syncing"):
            conn.execute(f"ALTER TABLE custody_out DROP COLUMN {column}")
        conn.execute("INSERT INTO custody_out (dest, priority, first, epoch) VALUES ('CC', 0, 12, '9a8b7c6d')")
        conn.execute("UPDATE meta SET value = '10' WHERE key = 'schema_version'")
    conn.close()
    cp = Checkpoint(path, "AA")
    assert cp.restore().custody_out == {("CC", 0): Kept(12, "9a8b7c6d", "", False)}
    assert cp.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    cp.close()


@pytest.mark.parametrize("body", [{"state": "abcd1234", "p": "0", "e": "", "x": 3}, {"state": "abcd1234", "p": 0},
                                  {"probe": "abcd1234", "p": 0, "e": "", "f": 5, "n": 2, "k": ""},
                                  {"probe": "abcd1234", "p": 0, "e": "", "f": 1, "n": 9, "k": "3-1"},
                                  {"state": "abcd1234", "p": 0, "e": "x", "x": -1, "r": ""}, {"sync": 5},
                                  {"state": "abcd1234", "p": 0, "e": "x", "x": 2, "r": 7},
                                  {"probe": "too long an epoch"}])
def test_a_malformed_custody_message_is_counted_and_dropped(tmp_path, body):
    from mccs.core.effects import Effects
    from mccs.core.lists import MSGBLOK
    net = _chain(tmp_path)
    cc = net["CC"].kernel
    blk = MSGBLOK(cc.seqs.take(), "CCMCCS", "AAMCCS", 9, 0, json.dumps(body).encode(), 0.0, flags=NOTICE)
    cc.control.arrived(Effects(), blk, 0.0)
    assert cc.counters["bad_daemon_messages"] == 1 and not cc.pairs.into.pairs.get(("AA", 0))


def test_a_probe_for_a_stream_nothing_of_which_came_yet_waits_for_the_numbers_before_custody():
    """Custody of a stream can begin by extension (another stream of the pair has it) while its first
    messages, numbered before, are still on their way: the probe must not make them duplicates."""
    from mccs.core.lists import MSGBLOK
    from mccs.core.pairs import PairsIn, Verdict
    pairs = PairsIn({})
    pair, ready, dropped, _ = pairs.settle(("AA", 3), "c5317a80", 11, 11, lambda n: n >= 11, 12, True)
    assert pair.expect == 1 and not ready and not dropped
    blk = MSGBLOK(1, "CCR   ", "AAS   ", 6, 6, b"late", 0.0, pseq=1, epoch="c5317a80", priority=3)
    assert pairs.arrive(blk)[0] is Verdict.DELIVER
    restored = PairsIn({})  # restored since custody began: it goes on from the lowest the origin keeps
    assert restored.settle(("AA", 3), "c5317a80", 11, 11, lambda n: n >= 11, 12, False)[0].expect == 11


@pytest.mark.parametrize("left, earlier", [(True, False), (False, False), (False, True)])
def test_an_origin_restored_from_a_backup_delivers_once_what_had_not_left_it_when_the_backup_was_taken(
        tmp_path, monkeypatch, capsys, left, earlier):
    """`left`: the messages without a number in the backup left the lost incarnation (and were
    delivered) before its disk was lost; or not. `earlier`: the destination is an MCCS from before
    doubts (it answers a=1 and no `had`): they go."""
    if earlier:
        monkeypatch.setattr(custody, "ANSWER", 1)
        monkeypatch.setattr(custody.Custody, "_doubts", lambda *args: None)
    net, flow = _in_custody(tmp_path)
    net.channel("AA", "BB").disconnect()
    flow.send(20)  # a window's worth numbered as they leave, the rest unnumbered on SEND_LIST
    aa = net["AA"].kernel
    doubtful = sum(not b.pseq for b in aa.lists.send if not b.flags & NOTICE)
    assert doubtful
    backup = net["AA"].backup()
    if left:
        net.channel("AA", "BB").reconnect()
        flow.take(20)  # numbered and delivered after the backup: the restored AA must not send them again
        flow.send(2)
        flow.take(2)  # (they leave AA before its disk is lost: one accepted and lost with it is not the case here)
    net["AA"].restore(backup)
    aa = net["AA"].kernel
    assert aa.custody.status()["doubts"] == doubtful
    _print_status({**aa.status(), "pid": 1, "uptime": 0.0})  # what `mccs status` shows the operator
    assert f"doubts {doubtful}" in capsys.readouterr().out.split("custody: ")[1].splitlines()[0]
    net.channel("AA", "BB").reconnect()
    flow.src = net.client("AA", "S")
    flow.send(3)
    flow.check()
    assert aa.counters["custody_doubts_had" if left else "custody_doubts_go"] == doubtful
    assert aa.custody.status()["doubts"] == 0
