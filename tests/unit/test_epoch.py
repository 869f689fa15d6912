"""The checkpoint epoch in the sign-on (issue 13): a host started afresh reuses its MSG_IDs, and its
neighbours take its new messages at once. In memory: the sign-on text of both protocols, old
machines against new ones, and kernels on a virtual clock (tools/hostsim)."""
from __future__ import annotations

import base64

import pytest

from linedrivers import AsyncLine, BscLine, LineUp
from linedrivers.async_frames import SignOn
from mccs.core import kernel
from mccs.testbed.linesim import Channel, make_images, run_pair
from tests.conftest import BEFORE_EPOCH
from mccs.testbed.hostsim import SimNet, line

pytestmark = pytest.mark.timeout(120)


# -- the sign-on text ------------------------------------------------------------------------------
def test_async_signon_carries_the_epoch_and_parses_without_it():
    body = SignOn("AA", 8, 143, "0000abcd", features=("ROUTE2",), large=4096, epoch="5e1f09a2").encode()
    assert body == b"MCCS/1 HOST=AA WINDOW=8 MAXMSG=143 SESSION=0000abcd FEAT=ROUTE2 LARGE=4096 EPOCH=5e1f09a2"
    assert SignOn.parse(body).epoch == "5e1f09a2"
    assert SignOn.parse(b"MCCS/1 HOST=AA WINDOW=8 MAXMSG=143").epoch == ""  # a version-1 sign-on
    assert SignOn.parse(body + b" NEWER=1").epoch == "5e1f09a2"  # unknown fields are ignored
    for bad in (b"EPOCH=xyz", b"EPOCH=5E1F09A2", b"EPOCH=" + b"1" * 17):
        assert SignOn.parse(b"MCCS/1 HOST=AA WINDOW=8 MAXMSG=143 " + bad) is None


def _async(local, peer, epoch="", **kw):
    def make():
        m = AsyncLine(local, peer, **kw)
        m.epoch = epoch
        return m
    return make


def _ups(res, side) -> list[str]:
    return [e.epoch for e in res.of(side, LineUp)]


@pytest.mark.parametrize("secret", [None, b"0123456789abcdef"])
def test_async_ends_learn_each_others_epoch(secret):
    """With a secret the epoch rides in S, T and V as the other sign-on values do."""
    res = run_pair(_async("AA", "BB", "0a0a0a0a", secret=secret), _async("BB", "AA", "0b0b0b0b", secret=secret),
                   make_images("AA", "BB", 5), make_images("BB", "AA", 5), channel=Channel(seed=1))
    res.check()
    assert set(_ups(res, "a")) == {"0b0b0b0b"} and set(_ups(res, "b")) == {"0a0a0a0a"}


def test_an_old_async_machine_signs_on_with_a_new_one_and_sends_no_epoch(old_linedrivers):
    """AsyncLine of commit 5bef087 (no EPOCH=) against today's: both ways work as before."""
    res = run_pair(_async("AA", "BB", "0a0a0a0a"), lambda: old_linedrivers.AsyncLine("BB", "AA"),
                   make_images("AA", "BB", 30), make_images("BB", "AA", 30), channel=Channel(seed=2, ber=1e-4))
    res.check()
    assert _ups(res, "a") and set(_ups(res, "a")) == {""}
    assert not res.a.refused and not res.b.refused and res.b.counters["bad_frames"] == 0


def _bsc(local, peer, role, epoch="", **kw):
    def make():
        m = BscLine(local, peer, role=role, features=("ROUTE2",), large=1 << 20, **kw)
        m.epoch = epoch
        return m
    return make


@pytest.mark.parametrize("code", ["ebcdic", "ascii"])
def test_bsc_announcements_carry_the_epoch(code):
    res = run_pair(_bsc("AA", "BB", "primary", "0a0a0a0a", code=code),
                   _bsc("BB", "AA", "secondary", "0b0b0b0b", code=code),
                   make_images("AA", "BB", 5), make_images("BB", "AA", 5), channel=Channel(seed=3, baud=9600))
    res.check()
    assert set(_ups(res, "a")) == {"0b0b0b0b"} and set(_ups(res, "b")) == {"0a0a0a0a"}



def test_bsc_announcement_bytes_with_the_epoch():
    m = BscLine("AA", "BB", features=("ROUTE2",), large=16777216, max_message=65517, code="ascii")
    m.epoch = "5e1f09a2"
    assert m._announcement() == bytes.fromhex("161601") + b"FEAT=ROUTE2 LARGE=16777216 MAXMSG=65517 EPOCH=5e1f09a2" \
        + bytes.fromhex("03d03cff")  # docs/PROTOCOL.md


def test_a_bsc_station_from_before_the_epoch_ignores_it(linedrivers_at):
    before = linedrivers_at(BEFORE_EPOCH)
    res = run_pair(_bsc("AA", "BB", "primary", "0a0a0a0a"),
                   lambda: before.BscLine("BB", "AA", role="secondary", features=("ROUTE2",), large=1 << 20),
                   make_images("AA", "BB", 20), make_images("BB", "AA", 20), channel=Channel(seed=4, baud=9600))
    res.check()
    ups = res.of("a", LineUp)
    assert ups and all(u.epoch == "" and u.features == {"ROUTE2"} for u in ups)  # features agreed, no epoch


# -- kernels: a host started afresh -----------------------------------------------------------------
def _exchange(net: SimNet, sender: str, receiver: str, texts: list[bytes]) -> tuple[list[int], list[bytes]]:
    s, r = net.client(sender, "S"), net.client(receiver, "R")
    ids = [s.send(f"{receiver}R", t)["msg_id"] for t in texts]
    got = []
    for _ in texts:
        reply = r.recv(timeout=30.0)
        if reply["msg"] is None:
            break
        got.append(reply)
    s.close()
    r.close()
    return ids, [base64.b64decode(g["msg"]["data"]) for g in got]


@pytest.mark.parametrize("protocol", ["async", "bsc"])
def test_a_host_started_afresh_is_heard_at_once_with_its_old_msg_ids(tmp_path, protocol):
    net = SimNet(tmp_path, {"AA": [line("BB", protocol=protocol, role="primary")],
                            "BB": [line("AA", protocol=protocol, role="secondary")]})
    before = [b"old %d" % i for i in range(5)]
    ids, got = _exchange(net, "AA", "BB", before)
    assert got == before
    back_ids, back = _exchange(net, "BB", "AA", [b"to old AA"])  # BB numbers its messages for AA
    epoch = net["AA"].kernel.epoch
    net["AA"].renew()  # the checkpoint lost; `mccs daemon --new-checkpoint`
    assert net["AA"].kernel.epoch != epoch
    after = [b"new %d" % i for i in range(5)]
    new_ids, got = _exchange(net, "AA", "BB", after)
    assert set(new_ids) & set(ids)  # MSG_IDs the old AA used, again (between them, custody's daemon messages) ...
    assert got == after  # ... taken as the new messages they are
    _, back = _exchange(net, "BB", "AA", [b"to new AA"])  # and BB numbers for the new AA from 1 again
    assert back == [b"to new AA"]
    lcb = net["BB"].kernel.lines["AA"]
    assert lcb.counters["peer_renewed"] == 1 and net["BB"].kernel.status()["lines"][0]["peer_epoch"] == \
        net["AA"].kernel.epoch
    net["BB"].crash()  # the epoch seen is in BB's checkpoint: a restart of BB forgets nothing again
    _, got = _exchange(net, "AA", "BB", [b"after BB restarted"])
    assert got == [b"after BB restarted"] and net["BB"].kernel.lines["AA"].counters["peer_renewed"] == 0


def _plain_machine(epoch_too: bool):
    """The daemon's lines as docs/DESIGN.md's version 1 (no ROUTE2: no envelope, no end-to-end numbers),
    with or without EPOCH= in the sign-on."""
    def make(host, lc, max_message, epoch="", random_bytes=None):
        m = AsyncLine(host, lc.peer, window=lc.window, keepalive=lc.keepalive, baud=lc.baud,
                      max_message=max_message, reply_timeout=lc.reply_timeout, retry_limit=lc.retry_limit,
                      random_bytes=random_bytes)
        m.epoch = epoch if epoch_too else ""
        return m
    return make


@pytest.mark.parametrize("epoch_too", [True, False])
def test_on_a_version_1_wire_only_the_epoch_tells_a_renewed_host(tmp_path, monkeypatch, epoch_too):
    """Without an envelope the duplicate window is all a receiver has: the sign-on's epoch clears
    it; a peer that sends none is treated exactly as before (its reused ids are duplicates)."""
    monkeypatch.setattr(kernel, "make_machine", _plain_machine(epoch_too))
    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA")]})
    assert _exchange(net, "AA", "BB", [b"a", b"b"])[1] == [b"a", b"b"]
    net["AA"].renew()
    s = net.client("AA", "S")
    assert [s.send("BBR", t)["msg_id"] for t in (b"c", b"d")] == [1, 2]
    net.run(lambda: not net["AA"].kernel.lists.send, duration=30)
    assert not net["AA"].kernel.lists.send  # acknowledged either way
    r = net.client("BB", "R")
    got = [r.recv(wait=False)["msg"] for _ in range(2)]
    if epoch_too:
        assert [m["msg_id"] for m in got] == [1, 2]
    else:
        assert got == [None, None] and net["BB"].kernel.lines["AA"].counters["duplicates"] == 2


def test_an_origin_two_lines_away_started_afresh_is_heard_by_its_envelope_epoch(tmp_path):
    """CC is no neighbour of AA: the epoch in the routing envelope of AA's messages tells it."""
    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA"), line("CC")], "CC": [line("BB")]})
    net.run(lambda: net["AA"].kernel.routes.next_hop("CC") == "BB", duration=30)
    before = [b"old %d" % i for i in range(3)]
    ids, got = _exchange(net, "AA", "CC", before)
    assert got == before
    net["AA"].renew()
    net.run(lambda: net["AA"].kernel.routes.next_hop("CC") == "BB", duration=30)
    after = [b"new %d" % i for i in range(3)]
    new_ids, got = _exchange(net, "AA", "CC", after)
    assert new_ids == ids and got == after
