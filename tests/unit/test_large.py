"""Large messages (issue 12): cut in segments on the line, checkpointed as they arrive, resumed
after a crash from what the receiver holds, delivered only whole and byte for byte. In memory:
kernels with real checkpoint files on simulated lines (tools/hostsim); the segment rules alone."""
from __future__ import annotations

import base64
import random
import sqlite3
import zlib

import pytest

from checkpoint import changes as ch
from checkpoint.store import Checkpoint
from mccs.core import segments
from mccs.core.segments import Partial, Reassembly, Refused, Segment
from mccs.testbed.hostsim import SimNet, line

pytestmark = pytest.mark.timeout(300)

BIG = 16 << 20


def _pair(tmp_path, baud: int = 115200, ber: float = 0.0, a_max: int = BIG, b_max: int = BIG, bsc: bool = False,
          **keys) -> SimNet:
    """AA and BB on an async line, or a BSC one (`bsc`: AA the primary)."""
    ends = [dict(protocol="bsc", role=role) if bsc else {} for role in ("primary", "secondary")]
    net = SimNet(tmp_path, {"AA": [line("BB", baud=baud, **ends[0], **keys)],
                            "BB": [line("AA", baud=baud, **ends[1], **keys)]}, max_message=a_max)
    net["BB"].cfg.max_message = b_max
    if b_max != a_max:  # BB signs on with its own maximum
        net["BB"].cfg.check()
        net["BB"].crash()
    for side in "ab":
        net.channel("AA", "BB").towards(side).imp.baud = baud
        net.channel("AA", "BB").towards(side).imp.ber = ber
    return net


def _data(reply: dict) -> bytes:
    return base64.b64decode(reply["msg"]["data"])


def _recv(net: SimNet, name: str = "R", duration: float = 900.0) -> dict:
    """RECV at BB once a message is there (the simulated clock runs up to `duration` for it)."""
    assert net.run(lambda: len(net["BB"].kernel.lists.recv), duration=duration), "nothing arrived"
    return net.client("BB", name).recv(wait=False)


def _wire(net: SimNet, to: str = "b") -> int:
    """Bytes written on the line towards BB (side b) so far."""
    return net.channel("AA", "BB").towards(to).stats.written


def test_a_large_message_goes_in_segments_and_arrives_whole_once_and_identical(tmp_path):
    net = _pair(tmp_path)
    data = random.Random(1).randbytes(1 << 20)
    msg_id = net.client("AA", "P").send("BBR", data)["msg_id"]
    got = _recv(net)
    assert got["msg"]["msg_id"] == msg_id and _data(got) == data
    assert net.client("BB", "R2").recv(wait=False)["msg"] is None  # once
    segs = net["BB"].kernel.lines["AA"].counters["segments"]
    assert segs >= len(data) // 8192
    # the line's capacity is 11,520 bytes/s: the transfer used most of it
    assert len(data) / net.now > 0.9 * 11520, f"{len(data) / net.now:.0f} bytes/s"
    assert net.run(lambda: len(net["AA"].kernel.lists.send) == 0, duration=10)
    assert not net["BB"].cp.conn.execute("SELECT count(*) FROM partials").fetchone()[0]


def _crc_zero(data: bytes) -> bytes:
    """`data` and 4 bytes more, chosen so that the CRC-32 of it all is 0: the CRC of the appended
    bytes is affine over GF(2), so the 32 bits solve a linear system."""
    base = zlib.crc32(data + bytes(4))
    basis: dict[int, tuple[int, int]] = {}  # leading bit -> (CRC change, the bits of x making it)
    for i in range(32):
        v, x = zlib.crc32(data + (1 << i).to_bytes(4, "little")) ^ base, 1 << i
        for bit in reversed(range(32)):
            if v >> bit & 1:
                if bit not in basis:
                    basis[bit] = (v, x)
                    break
                v, x = v ^ basis[bit][0], x ^ basis[bit][1]
    v, x = base, 0
    for bit in reversed(range(32)):
        if v >> bit & 1:
            v, x = v ^ basis[bit][0], x ^ basis[bit][1]
    assert v == 0
    return data + x.to_bytes(4, "little")


def test_a_large_text_whose_crc_32_is_0_goes_in_segments(tmp_path):
    """0 is a CRC-32 like any other: a text kept in the checkpoint only, with that CRC, is sent in
    segments from its Stored copy (it was once taken for a text in memory whose CRC was still to make)."""
    net = _pair(tmp_path)
    data = _crc_zero(random.Random(7).randbytes(100_000))
    assert zlib.crc32(data) == 0 and len(data) > ch.INLINE_MAX
    msg_id = net.client("AA", "P").send("BBR", data)["msg_id"]
    got = _recv(net)
    assert got["msg"]["msg_id"] == msg_id and _data(got) == data


@pytest.mark.parametrize("who", ["BB", "AA"])
def test_a_crash_half_way_resumes_from_what_the_receiver_holds(tmp_path, who):
    net = _pair(tmp_path)
    data = random.Random(2).randbytes(2 << 20)
    net.client("AA", "P").send("BBR", data)
    half = lambda: any(q.got >= len(data) // 2 for q in net["BB"].kernel.reassembly.partials.values())  # noqa
    assert net.run(half, duration=600)
    net[who].crash()  # kill -9 and a restart: memory gone, the checkpoint as last committed
    assert _data(_recv(net)) == data
    assert net.client("BB", "R2").recv(wait=False)["msg"] is None
    assert _wire(net) <= 1.3 * len(data), f"{_wire(net)} bytes on the wire for {len(data)}"


def test_noise_costs_only_the_damaged_segments(tmp_path):
    net = _pair(tmp_path, ber=1e-5)
    data = random.Random(3).randbytes(1 << 20)
    net.client("AA", "P").send("BBR", data)
    assert _data(_recv(net)) == data
    assert _wire(net) <= 1.3 * len(data)


def test_a_large_message_crosses_two_hops_through_a_crash_of_the_transit_host_with_its_receipt(tmp_path):
    hosts = {"AA": [line("BB")], "BB": [line("AA"), line("CC")], "CC": [line("BB")]}
    net = SimNet(tmp_path, hosts, max_message=BIG)
    data = random.Random(5).randbytes(600_000)
    p = net.client("AA", "P")
    assert net.run(lambda: net["AA"].kernel.routes.next_hop("CC") == "BB", duration=60)
    msg_id = p.send("CCR", data, receipt=True)["msg_id"]
    small = [p.send("CCR", b"after %d" % i)["msg_id"] for i in range(3)]  # they wait for it: order
    half = lambda: any(q.got >= len(data) // 2 for q in net["BB"].kernel.reassembly.partials.values())  # noqa
    assert net.run(half, duration=600)
    net["BB"].crash()
    assert net.run(lambda: len(net["CC"].kernel.lists.recv) >= 4, duration=900)
    r = net.client("CC", "R")
    got = [r.recv(wait=False)["msg"] for _ in range(4)]
    assert [m["msg_id"] for m in got] == [msg_id, *small] and base64.b64decode(got[0]["data"]) == data
    assert net.run(lambda: net["AA"].kernel.lists.recv.match("AAP   ", "CCMCCS", msg_id), duration=120)
    assert p.recv(wait=False, **{"from": "CCMCCS"})["msg"]["user_id"] == msg_id  # the delivered notice


def _cut(net: SimNet, a: str, b: str, drop: float = 1.0) -> None:
    """The cable between a and b is pulled (drop=1.0) or put back (drop=0.0)."""
    for side in "ab":
        net.channel(a, b).towards(side).imp.drop = drop


def _kept(net: SimNet, host: str) -> dict[str, int]:
    """What a host's checkpoint keeps of large messages: partials, their pieces, whole texts, forgets owed."""
    q = net[host].cp.conn.execute
    return {t: q(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("partials", "text_pieces", "texts", "forgets")}


def _nothing_kept(net: SimNet) -> bool:
    return not any(n for h in net.hosts for n in _kept(net, h).values())


def _square_with_a_transfer_half_way(tmp_path, seed: int):
    """AA, BB, CC, DD in a square; AA sends DD 300,000 bytes, which go in segments by one of BB and
    CC (`first`, the other is `other`) and are more than 50,000 bytes there."""
    hosts = {"AA": [line("BB"), line("CC")], "BB": [line("AA"), line("DD")], "CC": [line("AA"), line("DD")],
             "DD": [line("BB"), line("CC")]}
    net = SimNet(tmp_path, hosts, max_message=BIG)
    assert net.run(lambda: all(h.kernel.routes.next_hop("DD") for h in net.hosts.values() if h.id != "DD"),
                   duration=60)
    first = net["AA"].kernel.routes.next_hop("DD")
    data = random.Random(seed).randbytes(300_000)
    p = net.client("AA", "P")
    big = p.send("DDR", data)["msg_id"]
    assert net.run(lambda: net["AA"].kernel.lines[first].transfer is not None
                   and net["AA"].kernel.lines[first].transfer.blk.acked > 50_000, duration=120)
    return net, p, first, "CC" if first == "BB" else "BB", big, data


def _then_three_small_arrive_behind_it(net: SimNet, p, big: int, data: bytes) -> None:
    small = [p.send("DDR", b"after %d" % i)["msg_id"] for i in range(3)]
    assert net.run(lambda: len(net["DD"].kernel.lists.recv) >= 4, duration=600)
    r = net.client("DD", "R")
    got = [r.recv(wait=False)["msg"] for _ in range(4)]
    assert [m["msg_id"] for m in got] == [big, *small] and base64.b64decode(got[0]["data"]) == data


def test_a_message_in_segments_is_finished_on_its_line_when_the_route_moves_and_order_holds(tmp_path):
    net, p, first, other, big, data = _square_with_a_transfer_half_way(tmp_path, 6)
    net["AA"].kernel.routes.advert(first, b"DD=-", net.now)  # the path through `first` is gone
    assert net["AA"].kernel.routes.next_hop("DD") == other
    _then_three_small_arrive_behind_it(net, p, big, data)
    assert net["DD"].kernel.lines[first].counters["segments"] > 0 and not net["DD"].kernel.lines[other].counters[
        "segments"]


def test_a_message_in_segments_starts_again_by_another_route_when_its_line_is_lost(tmp_path):
    """The line carrying a message in segments is lost half way: the message goes on by the other
    route from its first byte, since the host there holds none of it, and arrives whole and once,
    those after it behind it. (An adversarial test found it resumed there at the offset the lost
    next hop held: every piece refused, yet acknowledged, and the message gone without a word.)"""
    net, p, first, other, big, data = _square_with_a_transfer_half_way(tmp_path, 7)
    for side in "ab":  # the cable is pulled
        net.channel("AA", first).towards(side).imp.drop = 1.0
    _then_three_small_arrive_behind_it(net, p, big, data)
    assert net["DD"].kernel.lines[other].counters["segments"] > 0
    assert not net["AA"].kernel.lists.send


def test_messages_of_the_largest_size_go_in_segments_while_the_segment_size_grows_and_all_arrive(tmp_path):
    """A new line starts with short segments and lengthens them: on the way a message of
    max_message bytes is cut in pieces whose text, with the trailer, is longer than max_message."""
    net = _pair(tmp_path, baud=9600, a_max=128, b_max=128)
    p = net.client("AA", "P")
    sent = [bytes([i]) * 128 for i in range(10)]
    for data in sent:  # one a second: each is cut with the segment size of its moment
        p.send("BBR", data)
        net.run(duration=1)
    assert net.run(lambda: len(net["BB"].kernel.lists.recv) >= len(sent), duration=60)
    r = net.client("BB", "R")
    assert [_data(r.recv(wait=False)) for _ in sent] == sent
    counters = net["BB"].kernel.lines["AA"].counters
    assert counters["segments"] > 0 and not counters["bad_images"] and not counters["segments_refused"]


def test_a_peer_with_a_smaller_maximum_gets_small_messages_and_the_large_one_waits(tmp_path):
    net = _pair(tmp_path, b_max=128)
    p = net.client("AA", "P")
    p.send("BBR", b"x" * 128)
    assert _data(_recv(net, duration=30)) == b"x" * 128
    p.send("BBR", b"y" * 100_000)
    net.run(duration=10)
    status = net["AA"].kernel.status()["lines"][0]
    assert status["large"] == 128 and status["held"].endswith("100000 bytes")
    assert net.client("BB", "R2").recv(wait=False)["msg"] is None


# -- forgets: the next host a transfer left drops what it holds (issue 32 item 4) -----------------------------
def test_the_host_a_transfer_left_drops_what_it_holds_once_its_line_is_back_even_after_a_restart(tmp_path):
    """The line carrying a message in segments is lost half way; the message goes on by the other
    route. The host that held its start is told to forget it (FEAT=FORGET) when its line is back,
    although the sender restarted meanwhile: nothing of the message is left anywhere."""
    net, p, first, other, big, data = _square_with_a_transfer_half_way(tmp_path, 7)
    _cut(net, "AA", first)
    _then_three_small_arrive_behind_it(net, p, big, data)
    assert _kept(net, first)["partials"] == 1 and _kept(net, "AA")["forgets"] == 1
    held = net[first].kernel.reassembly.partials
    assert _kept(net, first)["text_pieces"] and sum(len(d) for d, in net[first].cp.conn.execute(
        "SELECT data FROM text_pieces")) == next(iter(held.values())).got  # room only for what came
    net["AA"].crash()  # the forget owed is in the checkpoint
    _cut(net, "AA", first, 0.0)
    t0 = net.now
    assert net.run(lambda: _nothing_kept(net), duration=120), {h: _kept(net, h) for h in net.hosts}
    assert net.now - t0 < 20
    assert net[first].kernel.counters["partials_forgotten"] == 1
    assert "FORGET" in net["AA"].kernel.lines[first].features


def test_a_message_that_goes_back_to_the_host_told_to_forget_it_goes_from_its_start_and_arrives(tmp_path):
    """AA sends BB a message in segments, its line to BB is lost half way: it goes by CC, from its
    start. That line is lost half way too, and the one to BB is back: BB gets its forget in the
    pass the line comes up, before the first piece again (a forget after them would drop what BB
    acknowledged: the rest refused, the message lost). CC gets one when its line is back."""
    net = SimNet(tmp_path, {"AA": [line("BB"), line("CC")], "BB": [line("AA"), line("CC")],
                            "CC": [line("AA"), line("BB")]}, max_message=BIG)
    for channel in net.channels.values():
        for side in "ab":
            channel.towards(side).imp.baud = 115200
    data = random.Random(8).randbytes(300_000)
    assert net.run(lambda: net["AA"].kernel.routes.next_hop("BB") == "BB" and net["CC"].kernel.routes.next_hop(
        "BB") == "BB", duration=60)
    big = net.client("AA", "P").send("BBR", data)["msg_id"]
    for via in ("BB", "CC"):
        assert net.run(lambda: net["AA"].kernel.lines[via].transfer is not None
                       and net["AA"].kernel.lines[via].transfer.blk.acked > 50_000, duration=300)
        _cut(net, "AA", via)
    assert net.run(lambda: net["AA"].kernel.lines["CC"].state != "UP", duration=300)
    _cut(net, "AA", "BB", 0.0)  # BB is a neighbour: the message goes on in the pass the line comes up
    got = _recv(net, duration=300)
    assert got["msg"]["msg_id"] == big and _data(got) == data
    _cut(net, "AA", "CC", 0.0)
    assert net.run(lambda: _nothing_kept(net), duration=120), {h: _kept(net, h) for h in net.hosts}
    assert [net[h].kernel.counters["partials_forgotten"] for h in ("BB", "CC")] == [1, 1]
    assert not net["BB"].kernel.lines["AA"].counters["segments_refused"]


@pytest.mark.parametrize("how, protocol", [("ttl", "async"), ("purge", "async"), ("purge", "bsc")])
def test_a_message_given_up_half_way_is_forgotten_where_its_start_is(tmp_path, how, protocol):
    net = _pair(tmp_path, bsc=protocol == "bsc")
    data = random.Random(9).randbytes(1 << 20)
    msg_id = net.client("AA", "P").send("BBR", data, ttl=150)["msg_id"]
    half = lambda: any(q.got >= len(data) // 2 for q in net["BB"].kernel.reassembly.partials.values())  # noqa
    assert net.run(half, duration=120)
    _cut(net, "AA", "BB")
    if how == "purge":
        reply = net.client("AA", None).ask({"op": "queue", "action": "purge", "msg": f"AA/{msg_id}"})
        assert reply["ok"], reply
    assert net.run(lambda: _kept(net, "AA")["forgets"], duration=150)  # once the line gave it back, or its ttl
    _cut(net, "AA", "BB", 0.0)
    assert net.run(lambda: _nothing_kept(net), duration=60), {h: _kept(net, h) for h in net.hosts}
    assert net["BB"].kernel.counters["partials_forgotten"] == 1
    assert net.client("BB", "R").recv(wait=False)["msg"] is None


def test_a_next_host_without_forgets_keeps_its_partial_as_before_and_nothing_is_owed_to_it(tmp_path, monkeypatch):
    from mccs.core import machine
    net = _pair(tmp_path)
    msg_id = net.client("AA", "P").send("BBR", random.Random(10).randbytes(1 << 20))["msg_id"]
    assert net.run(lambda: net["BB"].kernel.reassembly.partials, duration=60)
    _cut(net, "AA", "BB")
    monkeypatch.setattr(machine, "FEATURES", (machine.ROUTE,))
    net["BB"].crash()  # an MCCS of before: its lines offer no FORGET
    monkeypatch.undo()
    assert net.client("AA", None).ask({"op": "queue", "action": "purge", "msg": f"AA/{msg_id}"})["ok"]
    assert net.run(lambda: _kept(net, "AA")["forgets"], duration=60)
    _cut(net, "AA", "BB", 0.0)
    assert net.run(lambda: not _kept(net, "AA")["forgets"], duration=60)  # not kept for a peer that cannot take it
    assert "ROUTE2" in net["AA"].kernel.lines["BB"].features and "FORGET" not in net["AA"].kernel.lines["BB"].features
    assert _kept(net, "BB")["partials"] == 1  # kept until its ttl, as before


# -- the receiver's rules ----------------------------------------------------------------------------
def _seg(data: bytes, offset: int, n: int, total: int | None = None, crc: int | None = None) -> Segment:
    return Segment(len(data) if total is None else total, offset, segments.crc_of(data) if crc is None else crc,
                   data[offset:offset + n])


def test_segments_with_a_wrong_total_offset_length_or_text_are_refused_and_nothing_is_made():
    data = bytes(range(256)) * 40  # 10,240 bytes
    ids = iter(range(1, 100))
    r = Reassembly(max_message=8192)
    with pytest.raises(Refused, match="over the maximum"):
        r.arrive(("AA", 1), "BBR   ", _seg(data, 0, 1000), lambda: next(ids), 0.0, [])
    r = Reassembly(max_message=BIG)
    out: list = []
    with pytest.raises(Refused, match="does not fit"):
        r.arrive(("AA", 1), "BBR   ", _seg(data, 0, 1000, total=500), lambda: next(ids), 0.0, out)
    with pytest.raises(Refused, match="start is not held"):
        r.arrive(("AA", 1), "BBR   ", _seg(data, 1000, 1000), lambda: next(ids), 0.0, out)
    assert r.arrive(("AA", 1), "BBR   ", _seg(data, 0, 4000), lambda: next(ids), 0.0, out) is None
    assert r.arrive(("AA", 1), "BBR   ", _seg(data, 0, 2000), lambda: next(ids), 0.0, out) is None  # held: again
    with pytest.raises(Refused, match="a gap"):
        r.arrive(("AA", 1), "BBR   ", _seg(data, 6000, 1000), lambda: next(ids), 0.0, out)
    changed = bytes(reversed(data))
    with pytest.raises(Refused, match="transfer changed"):  # a resumed transfer whose first segments changed
        r.arrive(("AA", 1), "BBR   ", _seg(changed, 4000, 1000), lambda: next(ids), 0.0, out)
    assert ("AA", 1) not in r.partials
    # a message larger than announced: the pieces add up to more than the CRC was made of
    out = []
    lie = segments.crc_of(data[:8000])
    r.arrive(("AA", 2), "BBR   ", _seg(data, 0, 8000, total=len(data), crc=lie), lambda: next(ids), 0.0, out)
    with pytest.raises(Refused, match="CRC-32"):
        r.arrive(("AA", 2), "BBR   ", _seg(data, 8000, 4000, crc=lie), lambda: next(ids), 0.0, out)
    assert ("AA", 2) not in r.partials and any("DELETE FROM partials" in c.sql for c in out)


def test_a_completed_transfer_knows_its_resent_segments_as_duplicates():
    data = b"z" * 3000
    ids = iter(range(1, 100))
    r = Reassembly(max_message=BIG)
    out: list = []
    assert r.arrive(("AA", 7), "BBR   ", _seg(data, 0, 2000), lambda: next(ids), 0.0, out) is None
    done = r.arrive(("AA", 7), "BBR   ", _seg(data, 2000, 1000), lambda: next(ids), 0.0, out)
    assert done is not None and done.got == 3000
    assert isinstance(r.finish(done)[0], ch.Change)
    out = []
    assert r.arrive(("AA", 7), "BBR   ", _seg(data, 2000, 1000), lambda: next(ids), 0.0, out) is None
    assert r.arrive(("AA", 7), "BBR   ", _seg(data, 0, 2000), lambda: next(ids), 0.0, out) is None
    assert out == [] and not r.partials


def test_pieces_take_room_as_they_come_and_a_forget_drops_only_the_transfer_of_the_host_that_sent_it(tmp_path):
    data = random.Random(11).randbytes(30_000)
    ids = iter(range(1, 100))
    cp = Checkpoint(tmp_path / "BB.db", "BB")
    r = Reassembly(max_message=BIG)
    out: list = []
    for off in (0, 7000, 3000, 14000):  # the third is held already, in part
        assert r.arrive(("AA", 1), "BBR   ", _seg(data, off, 7000), lambda: next(ids), 0.0, out, "AA") is None
    assert not any("zeroblob" in c.sql for c in out)
    cp.apply(out)
    p = r.partials["AA", 1]
    assert p.got == 21_000 and cp.conn.execute("SELECT sum(length(data)) FROM text_pieces").fetchone()[0] == 21_000
    assert cp.read_blob(p.stored(), 6000, 9000) == data[6000:15000]  # across pieces
    assert vars(Partial(*cp.restore().partials[0])) == vars(p)  # the sender that counts on it too
    ident = ("BBR   ", len(data), segments.crc_of(data))
    assert r.forgotten("DD", ("AA", 1), ident) is None  # another next host's word does not count
    assert r.forgotten("AA", ("AA", 1), ("BBR   ", len(data), 5)) is None  # another transfer
    r.arrive(("AA", 1), "BBR   ", _seg(data, 0, 7000), lambda: next(ids), 0.0, [], "DD")  # it came a second way:
    assert r.forgotten("AA", ("AA", 1), ident) is None  # DD counts on it now
    assert r.forgotten("DD", ("AA", 1), ident) is p
    cp.apply(r.drop(p))
    assert cp.conn.execute("SELECT count(*) FROM text_pieces").fetchone()[0] == 0
    cp.close()


def test_a_version_8_partial_moves_into_pieces_and_its_transfer_goes_on(tmp_path):
    path = tmp_path / "BB.db"
    Checkpoint(path, "BB").close()
    data, got = random.Random(12).randbytes(200_000), 150_000
    with sqlite3.connect(path) as db:  # as version 8 left it: room for the whole text with the first piece
        for table in ("send_list", "recv_list"):
            for trigger, when in (("deleted", f"AFTER DELETE ON {table} WHEN old.text != 0"),
                                  ("dropped", f"AFTER UPDATE OF text ON {table} WHEN old.text != 0 "
                                              "AND new.text != old.text")):
                db.execute(f"DROP TRIGGER {table}_text_{trigger}")
                db.execute(f"CREATE TRIGGER {table}_text_{trigger} {when} BEGIN DELETE FROM texts "
                           "WHERE id = old.text; END")
        db.execute("DROP TABLE text_pieces")
        db.execute("DROP TABLE forgets")
        db.execute("ALTER TABLE partials DROP COLUMN peer")
        db.execute("INSERT INTO partials VALUES (5, 'AA', 3, 'BBR   ', ?, ?, ?, ?, 0.0)",
                   (len(data), segments.crc_of(data), got, segments.crc_of(data[:got])))
        db.execute("INSERT INTO texts VALUES (5, ?)", (data[:got] + bytes(len(data) - got),))
        db.execute("UPDATE meta SET value = '8' WHERE key = 'schema_version'")
    db.close()
    cp = Checkpoint(path, "BB")
    r = Reassembly(BIG, [Partial(*p) for p in cp.restore().partials])
    out: list = []
    whole = r.arrive(("AA", 3), "BBR   ", _seg(data, got, len(data)), lambda: 99, 1.0, out, "AA")
    assert whole is not None
    cp.apply([*out, *r.finish(whole)])
    assert cp.read_blob(whole.stored(), 0, len(data)) == data
    assert cp.conn.execute("SELECT count(*) FROM texts").fetchone()[0] == 0
    cp.apply([ch.add_block(ch.Table.RECV_LIST, ch.Row(99, "BBR   ", "AAP   ", 3, 0, whole.stored(), 0.0,
                                                     crc=whole.crc))])
    assert cp.restore().recv_list[0].data == whole.stored()  # its size the sum of its pieces
    cp.apply([ch.delete_block(ch.Table.RECV_LIST, 99)])  # the trigger takes the pieces with the row
    assert cp.conn.execute("SELECT count(*) FROM text_pieces").fetchone()[0] == 0
    cp.close()


def test_the_core_asks_for_the_pieces_of_a_stored_text_and_reads_the_next_one_ahead():
    text = ch.Stored(7, 250, 0)
    blobs = segments.Blobs()
    assert blobs.piece(text, 0, 100) is None and list(blobs.wanted.values()) == [(text, 0, 100)]  # read it first
    blobs.wanted.clear()
    blobs.arrived(text, 0, b"a" * 100)
    assert blobs.piece(text, 0, 100) == b"a" * 100
    assert list(blobs.wanted.values()) == [(text, 100, 100), (text, 200, 100)]  # the next ones, ahead of their turn
    blobs.wanted.clear()
    blobs.arrived(text, 100, b"b" * 100)
    blobs.arrived(text, 200, b"c" * 50)
    assert blobs.piece(text, 100, 100) == b"b" * 100 and not blobs.wanted  # (those after it are here already)
    assert blobs.piece(text, 200, 100) == b"c" * 50 and not blobs.wanted  # the last: shorter, nothing after it
    assert blobs.piece(b"held in memory", 5, 2) == b"in"
