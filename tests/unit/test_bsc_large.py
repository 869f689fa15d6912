"""BSC features (issue 12 item 4): the sign-on announcement and its commit block agree on ROUTE2 and
LARGE= between new stations, an old station signs on as docs/DESIGN.md 4.2 says and never takes the
announcement for anything, segments are whole blocks, and a transmission cut by a line drop
resumes at the first block the receiver lacks. Machine pairs on mccs.testbed.linesim, and daemons
on mccs.testbed.hostsim: a 1 MiB message over BSC, and routing across a BSC line."""
from __future__ import annotations

import base64
import importlib
import random

import pytest

from linedrivers import BscLine, FrameTraced, LineUp
from linedrivers.bsc_line import SEGMENT_SECONDS
from linedrivers.bsc_codes import ASCII, EBCDIC
from linedrivers.bsc_reader import BscReader
from linedrivers.image import HEADER_SIZE
from mccs.testbed.linesim import Channel, Harness, make_images, run_pair
from mccs.testbed.hostsim import SimNet, line

pytestmark = pytest.mark.timeout(300)

SECRET = b"0123456789abcdef"


def new(local, peer, role="primary", **kw):
    return lambda: BscLine(local, peer, role=role, features=("ROUTE2",), large=1 << 20, **kw)


def plain(local, peer, role="primary", **kw):
    return lambda: BscLine(local, peer, role=role, **kw)


@pytest.fixture(scope="module")
def old_bsc(old_linedrivers):
    return old_linedrivers.BscLine


def ups(res, side):
    return [(e.features, e.large) for e in res.of(side, LineUp)]


# --- agreement ------------------------------------------------------------------------------
@pytest.mark.parametrize("code", ["ebcdic", "ascii"])
@pytest.mark.parametrize("secret", [None, SECRET])
def test_new_stations_agree_on_features(code, secret):
    kw = dict(code=code, secret=secret, max_message=300)
    res = run_pair(new("AA", "BB", **kw), lambda: BscLine("BB", "AA", role="secondary", features=("ROUTE2", "X"),
                                                          large=5000, **kw),
                   make_images("AA", "BB", 20, size=280), make_images("BB", "AA", 20, size=280),
                   channel=Channel(seed=1, baud=9600))
    res.check()
    assert ups(res, "a") == ups(res, "b") == [(frozenset({"ROUTE2"}), 5000)]
    assert res.a.counters["garbage"] == res.b.counters["garbage"] == 0


@pytest.mark.parametrize("code", ["ebcdic", "ascii"])
def test_a_station_offering_nothing_signs_on_as_version_1(code):
    """With the new code off, nothing new goes on the wire; against it the new station is version 1."""
    res = run_pair(new("AA", "BB", code=code), plain("BB", "AA", "secondary", code=code),
                   make_images("AA", "BB", 30), make_images("BB", "AA", 30), channel=Channel(seed=2, baud=9600))
    res.check()
    assert ups(res, "a") == ups(res, "b") == [(frozenset(), 0)]
    assert not any(isinstance(e, FrameTraced) and e.dir == "tx" and e.kind == "FEAT"
                   for _, s, e in res.events if s == "b")


@pytest.mark.parametrize("code", ["ebcdic", "ascii"])
@pytest.mark.parametrize("secret", [None, SECRET])
@pytest.mark.parametrize("old_role", ["primary", "secondary"])
def test_an_old_station_never_refuses_and_never_takes_the_announcement_for_a_message(old_bsc, code, secret, old_role):
    """BscLine of commit 5bef087 as either end (the primary wins the sign-on bid), through a drop."""
    kw = dict(code=code, secret=secret, max_message=300, block_size=64)
    new_role = "secondary" if old_role == "primary" else "primary"
    h = Harness(new("AA", "BB", new_role, **kw), lambda: old_bsc("BB", "AA", role=old_role, **kw),
                channel=Channel(seed=3, baud=9600))
    h.send("a", make_images("AA", "BB", 40, size=280, random_size=True))
    h.send("b", make_images("BB", "AA", 40, size=280, random_size=True, seed=1))
    h.at(20, lambda h: h.channel.disconnect())  # a drop, and the sign-on again
    h.at(50, lambda h: h.channel.reconnect())
    res = h.result(h.run(3600, settle=5))
    res.check()  # every message once, in order, nothing more: the old station delivered no garbage
    assert len(res.a.downs) >= 1 and all(u == (frozenset(), 0) for u in ups(res, "a"))
    assert not res.a.refused and not res.b.refused
    assert not any(d.startswith("refused") for d in res.a.downs + res.b.downs)
    assert res.b.counters["bad_sequences"] > 0  # it dropped the announcements, and hunted on
    assert res.b.counters["bad_messages"] == 0


def test_the_old_reader_drops_an_announcement_and_reads_the_id_after_it(old_linedrivers):
    for cs in (EBCDIC, ASCII):
        counters: dict = dict.fromkeys(("garbage", "crc_errors", "bad_sequences", "oversized"), 0)
        reader = importlib.import_module(f"{old_linedrivers.__name__}.bsc_reader").BscReader(
            importlib.import_module(f"{old_linedrivers.__name__}.bsc_codes").CODE_SETS[cs.name], 300, counters)
        wire = cs.announcement("FEAT=ROUTE2 LARGE=16777216 MAXMSG=65517".encode(cs.codec)) + \
            cs.sequence("ENQ", cs.encode_id("AA"))
        seqs = reader.feed(wire)
        assert [s.kind for s in seqs] == ["ID_ENQ"] and counters["bad_sequences"] == 1
        new_seqs = BscReader(cs, 300, dict(counters)).feed(wire)
        assert [s.kind for s in new_seqs] == ["FEAT", "ID_ENQ"] and new_seqs[0].ok


def test_announcement_bytes():
    from linedrivers.crc import crc16, le16
    text = "FEAT=ROUTE2 LARGE=1048576 MAXMSG=8164"
    for cs, syn in ((ASCII, 0x16), (EBCDIC, 0x32)):
        data = text.encode(cs.codec)
        bcc = le16(crc16(b"\x03", crc16(data)))
        assert cs.announcement(data) == bytes([syn, syn, 0x01]) + data + b"\x03" + bcc + b"\xff"


def test_a_lost_answer_announcement_leaves_both_ends_without_features():
    """The answering station's announcement is hit by noise: the bidder goes on as version 1, and so
    does the answering station when a message block comes instead of the commit."""
    h = Harness(new("AA", "BB"), new("BB", "AA", "secondary"), channel=Channel(seed=4, baud=9600), start=("a",))
    h.send("a", make_images("AA", "BB", 3))
    b = h["b"].machine
    tx = b._tx

    def hit(kind, frame=None, **kw):
        if kind == "FEAT":  # one bit of its text changes: its BCC fails
            frame = frame[:5] + bytes([frame[5] ^ 1]) + frame[6:]
        return tx(kind, frame, **kw)
    b._tx = hit
    res = h.result(h.run(600, settle=2))
    res.check()
    assert ups(res, "a") == ups(res, "b") == [(frozenset(), 0)]
    assert b.counters["crc_errors"] == 0 and h["a"].machine.counters["crc_errors"] == 1


# --- segments ---------------------------------------------------------------------------------
@pytest.mark.parametrize("block_size,max_message", [(256, 65517), (256, 8000), (64, 65517), (100, 3000), (256, 100)])
def test_segment_size_is_whole_blocks_within_the_image_limit(block_size, max_message):
    m = BscLine("AA", "BB", block_size=block_size, max_message=max_message, features=("ROUTE2",), large=1 << 24)
    size = m.segment_size()
    assert HEADER_SIZE + size <= HEADER_SIZE + max_message
    if block_size * 2 <= HEADER_SIZE + max_message:
        assert (HEADER_SIZE + size) % block_size == 0
        assert 2 * block_size <= HEADER_SIZE + size <= max(2 * block_size, 9600 / 10 * SEGMENT_SECONDS)


def test_segment_size_follows_the_peers_smaller_maximum():
    res = run_pair(new("AA", "BB", max_message=65517), new("BB", "AA", "secondary", max_message=3000),
                   make_images("AA", "BB", 2), channel=Channel(seed=5, baud=9600))
    assert res.a.machine.segment_size() + HEADER_SIZE == (HEADER_SIZE + 3000) // 256 * 256


# --- resume -------------------------------------------------------------------------------------
def _blocks_sent(res, side="a"):
    return sum(1 for _, s, e in res.events if s == side and isinstance(e, FrameTraced) and e.dir == "tx"
               and e.kind in ("ETB", "ETX"))


@pytest.mark.parametrize("secret", [None, SECRET])
def test_a_transmission_cut_by_a_line_drop_resumes_at_the_first_block_not_held(secret):
    kw = dict(block_size=64, max_message=4000, secret=secret)
    image = make_images("AA", "BB", 1, size=40 * 64 - HEADER_SIZE, seed=7)  # 40 blocks
    h = Harness(new("AA", "BB", **kw), new("BB", "AA", "secondary", **kw), channel=Channel(seed=6, baud=9600))
    h.send("a", image)
    h.at(1.5, lambda h: h.channel.disconnect())
    h.at(40, lambda h: h.channel.reconnect())
    res = h.result(h.run(600, settle=2))
    res.check()
    assert res.a.downs and len(ups(res, "a")) >= 2
    assert 10 <= res.a.counters["resumed_blocks"] < 40
    # every block went once but for retransmissions and the one cut on the line: none held went again
    assert _blocks_sent(res) - res.a.counters["retransmissions"] <= 41


def test_resume_counts_the_blocks_on_the_line():
    """The same cut without features: the image goes again whole."""
    image = make_images("AA", "BB", 1, size=40 * 64 - HEADER_SIZE, seed=7)
    counts = {}
    for name, make in (("new", new), ("plain", plain)):
        h = Harness(make("AA", "BB", block_size=64, max_message=4000),
                    make("BB", "AA", "secondary", block_size=64, max_message=4000), channel=Channel(seed=6, baud=9600))
        h.send("a", image)
        h.at(1.5, lambda h: h.channel.disconnect())
        h.at(40, lambda h: h.channel.reconnect())
        res = h.result(h.run(600, settle=2))
        res.check()
        counts[name] = (_blocks_sent(res), res.a.counters["resumed_blocks"])
    (new_sent, resumed), (plain_sent, _) = counts["new"], counts["plain"]
    assert resumed > 10 and new_sent <= plain_sent - resumed + 1


def test_only_a_first_block_reads_like_the_start_of_an_image():
    """How the receiver tells a resumed block from a new image (and the sender avoids the doubt)."""
    from linedrivers.bsc_agree import starts_image
    first = make_images("AA", "BB", 1, size=300)[0]
    assert starts_image(first[:64], False) and starts_image(first, True)
    assert not starts_image(first[64:128], False)


@pytest.mark.parametrize("code,seed", [("ebcdic", 11), ("ascii", 12)])
def test_exactly_once_with_resume_through_noise_and_drops(code, seed):
    kw = dict(code=code, block_size=64, max_message=2000)
    channel = Channel(seed=seed, ber=5e-4, drop_bytes=1e-4, drop=0.002, delay=0.01, baud=9600)
    h = Harness(new("AA", "BB", **kw), new("BB", "AA", "secondary", **kw), channel=channel)
    h.send("a", make_images("AA", "BB", 60, size=1900, random_size=True, seed=seed))
    h.send("b", make_images("BB", "AA", 60, size=1900, random_size=True, seed=seed + 1))
    for t in range(20, 400, 37):
        h.at(t, lambda h: h.channel.disconnect())
        h.at(t + 25, lambda h: h.channel.reconnect())
    res = h.result(h.run(36000, settle=5))
    res.check()
    assert res.a.counters["resumed_blocks"] + res.b.counters["resumed_blocks"] > 0
    assert res.a.counters["crc_errors"] + res.b.counters["crc_errors"] > 10
    # noise costs some sign-ons their announcement: those go on without features, at both ends
    assert ups(res, "a") == ups(res, "b") and (frozenset({"ROUTE2"}), 1 << 20) in ups(res, "a")


# --- daemons --------------------------------------------------------------------------------------
def _bsc_pair(tmp_path, baud: int) -> SimNet:
    net = SimNet(tmp_path, {"AA": [line("BB", protocol="bsc", role="primary", baud=baud)],
                            "BB": [line("AA", protocol="bsc", role="secondary", baud=baud)]}, max_message=16 << 20)
    for side in "ab":
        net.channel("AA", "BB").towards(side).imp.baud = baud
    return net


def test_a_large_message_crosses_a_bsc_line_whole_and_identical(tmp_path):
    net = _bsc_pair(tmp_path, 115200)
    data = random.Random(1).randbytes(1 << 20)
    msg_id = net.client("AA", "P").send("BBR", data)["msg_id"]
    assert net.run(lambda: len(net["BB"].kernel.lists.recv), duration=900)
    got = net.client("BB", "R").recv(wait=False)
    assert got["msg"]["msg_id"] == msg_id and base64.b64decode(got["msg"]["data"]) == data
    assert net.client("BB", "R2").recv(wait=False)["msg"] is None
    lc = net["BB"].kernel.lines["AA"]
    assert lc.routed and lc.large == 16 << 20 and lc.counters["segments"] >= len(data) // (11520 * SEGMENT_SECONDS)
    # 256-byte blocks, stop and wait: the ceiling is 256 / (256 + 9 + 5) of 11,520 bytes/s
    assert len(data) / net.now > 0.9 * 11520 * 256 / 270, f"{len(data) / net.now:.0f} bytes/s"


def test_routing_crosses_a_bsc_line(tmp_path):
    net = SimNet(tmp_path, {"AA": [line("BB", protocol="bsc", role="primary")],
                            "BB": [line("AA", protocol="bsc", role="secondary"), line("CC")],
                            "CC": [line("BB")]}, max_message=16 << 20)
    assert net.run(lambda: net["AA"].kernel.routes.next_hop("CC") == "BB", duration=60), "AA never learned CC"
    data = random.Random(2).randbytes(100_000)
    assert net.client("AA", "P").send("CCR", data)["ok"]
    assert net.run(lambda: len(net["CC"].kernel.lists.recv), duration=900), "nothing arrived at CC"
    got = net.client("CC", "R").recv(wait=False)
    assert base64.b64decode(got["msg"]["data"]) == data
    assert net["AA"].kernel.lines["BB"].routed
