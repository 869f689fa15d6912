"""Async lines for large messages (docs/PROTOCOL.md): CRC-32 on long frames (FEAT=FCS32), the
segment size that follows the line's error rate, and the reply timer of the frames in use."""
import random
import zlib

import pytest

from linedrivers import AsyncLine
from linedrivers.async_frames import SignOn, encode_frame, stuff, unstuff
from linedrivers.crc import x25
from linedrivers.events import LineUp, MessageReceived
from linedrivers.image import encode
from mccs.testbed.linesim import Channel, Harness, make_images

LONG = make_images("AA", "BB", 1, 240)[0]  # a 258-byte image: a long frame


def frames(wire: bytes) -> list[bytes]:
    """The unstuffed contents (KIND..FCS) of the frames in `wire`."""
    return [unstuff(f) for f in wire.split(b"\x7e") if f]


def fcs32_ok(content: bytes) -> bool:
    """An independent oracle: zlib's CRC-32 is crcmod's 'crc-32'."""
    return content[-4:] == zlib.crc32(content[:-4]).to_bytes(4, "little")


def fcs16_ok(content: bytes) -> bool:
    return content[-2:] == x25(content[:-2]).to_bytes(2, "little")


def up_pair(a: dict = {}, b: dict = {}, channel=None) -> Harness:
    """A and B signed on, MAXMSG 4096 unless told otherwise."""
    h = Harness(lambda: AsyncLine("AA", "BB", **{"max_message": 4096, **a}),
                lambda: AsyncLine("BB", "AA", **{"max_message": 4096, **b}), channel=channel or Channel())
    assert h.run(10, stop=lambda h: h["a"].up and h["b"].up)
    return h


def tap(h: Harness, side: str) -> list[bytes]:
    """Everything `side` writes from now on, write by write."""
    pipe, wire = h.channel.outof(side), []
    write = pipe.write
    pipe.write = lambda data, now: (wire.append(bytes(data)), write(data, now))
    return wire


def signed_on(**kw) -> AsyncLine:
    """BB UP with AA, whose S offered FCS32 (SEQ state 0)."""
    m = AsyncLine("BB", "AA", max_message=4096, **kw)
    m.receive_data(encode_frame("S", body=SignOn("AA", 8, 4096, "0000abcd", features=("FCS32",)).encode()), 0.0)
    assert isinstance(m.events()[-1], LineUp)
    m.data_to_send()
    return m


class Segmenter:
    """The daemon's part: cut `total` seeded bytes from `side` into images, each MESSAGE as long as
    the machine's segment_size() (or `fixed`) when the image is queued, a window or so ahead."""

    def __init__(self, side: str, total: int, fixed: int | None = None, seed: int = 0):
        self.side, self.fixed = side, fixed
        self.data = random.Random(f"{seed}/{side}").randbytes(total)
        self.sizes: list[int] = []

    def top_up(self, h: Harness) -> bool:
        s, m = h[self.side], h[self.side].machine
        src, dst = ("AA", "BB") if self.side == "a" else ("BB", "AA")
        while self.data and s.up and len(s.queue) < max(1, m.room()):
            n = self.fixed or m.segment_size()
            self.sizes.append(n)
            h.send(self.side, [encode(dst + "Q", src + "P", (len(s.sent) + 1) & 0xFFFF, 0, self.data[:n])])
            self.data = self.data[n:]
        return not self.data

    def run(self, h: Harness, until: float, *others: "Segmenter") -> None:
        assert h.run(until, stop=lambda h: all([g.top_up(h) for g in (self, *others)]) and h.done())


# --- CRC-32 on long frames ------------------------------------------------------------------------
@pytest.mark.timeout(10)
def test_fcs32_is_agreed_and_used_on_long_frames_only():
    h = up_pair()
    assert all("FCS32" in e.features for _, s, e in h.events if isinstance(e, LineUp))
    wire = tap(h, "a")
    short = make_images("AA", "BB", 1, 238)[0]  # 256 bytes of body: still CRC-16
    h.send("a", [LONG, short])
    h.run_for(5)
    data = [c for c in frames(b"".join(wire)) if c[:1] == b"D"]
    assert [c[3:-4] for c in data if fcs32_ok(c)] == [LONG]
    assert [c[3:-2] for c in data if fcs16_ok(c)] == [short]
    assert [e.image for _, s, e in h.events if s == "b" and isinstance(e, MessageReceived)] == [LONG, short]
    # byte for byte, as docs/PROTOCOL.md shows it
    img = encode("BBQ", "AAP", 1, 0, bytes(240))
    frame = encode_frame("D", 0, 0, img, fcs32=True)
    assert frame == bytes.fromhex("7e 44 00 00 42 42 51 20 20 20 41 41 50 20 20 20 00 01 00 00 00 f0") + bytes(240) \
        + bytes.fromhex("5b a4 2a a3 7e")
    assert encode_frame("D", 0, 0, img)[-3:] == bytes.fromhex("ca 9f 7e")  # without FCS32: CRC-16
    body = SignOn("AA", 8, 4107, "0000abcd", features=("ROUTE2", "SREJ", "FCS32"), large=1048576).encode()
    assert body == b"MCCS/1 HOST=AA WINDOW=8 MAXMSG=4107 SESSION=0000abcd FEAT=ROUTE2,SREJ,FCS32 LARGE=1048576"
    assert encode_frame("S", body=body) == b"\x7eS\x00\x00" + body + bytes.fromhex("32 9e 7e")


@pytest.mark.timeout(10)
@pytest.mark.parametrize("peer", [dict(fcs32=False), dict(selective_repeat=False)])
def test_a_peer_that_does_not_offer_fcs32_sees_the_protocol_unchanged(peer):
    """AA offers FCS32, BB does not: AA's frames are byte for byte those of an AA that never offered it."""
    writes = {}
    for offers in (True, False):
        h = up_pair(dict(fcs32=offers), peer)
        assert not any("FCS32" in e.features for _, s, e in h.events if isinstance(e, LineUp))
        wire = tap(h, "a")
        h.send("a", make_images("AA", "BB", 20, 400, random_size=True))
        assert h.run(60)
        writes[offers] = b"".join(wire)
        assert all(fcs16_ok(c) for c in frames(writes[offers]))
    assert writes[True] == writes[False] and len(frames(writes[True])) == 20
    old = AsyncLine("BB", "AA", selective_repeat=False)  # as docs/DESIGN.md 4.1: no FEAT at all
    assert b"FEAT" not in old._signon_body("0000abcd")


def _x25_collision(body: bytes) -> bytes:
    """`body` with byte 30 changed and two bytes at 100 changed to keep its CRC-16 (the CRC of a
    16-bit burst is linear and one-to-one, so exactly one pair fits): damage CRC-16 cannot see."""
    hit = body[:30] + bytes((body[30] ^ 0x01,)) + body[31:]
    want = x25(body)
    for v in range(65536):
        forged = hit[:100] + v.to_bytes(2, "big") + hit[102:]
        if x25(forged) == want:
            return forged
    raise AssertionError("no collision")


@pytest.mark.timeout(10)
def test_crc32_catches_damage_that_crc16_misses():
    content = b"D\x00\x00" + LONG
    forged = _x25_collision(content)
    assert forged != content and x25(forged) == x25(content)
    # without FCS32 such a frame would be taken: its FCS holds and its image is well formed
    old = AsyncLine("BB", "AA", max_message=4096, fcs32=False)
    old.receive_data(encode_frame("S", body=SignOn("AA", 8, 4096, "0000abcd").encode()), 0.0)
    old.receive_data(encode_frame("D", 0, 0, forged[3:]), 1.0)
    assert [e.image for e in old.events() if isinstance(e, MessageReceived)] == [forged[3:]]
    # with FCS32 the same damage on the wire of a CRC-32 frame is caught and counted
    m = signed_on()
    m.receive_data(b"\x7e" + stuff(forged + zlib.crc32(content).to_bytes(4, "little")) + b"\x7e", 1.0)
    assert m.counters["crc_errors"] == 1 and not [e for e in m.events() if isinstance(e, MessageReceived)]
    # a long frame with a CRC-16, and a length that fits neither rule, are damaged frames too
    m.receive_data(encode_frame("D", 0, 0, LONG), 1.0)
    m.receive_data(b"\x7e" + b"D\x00\x00" + bytes(259) + b"\x7e", 1.0)  # 262 bytes: neither
    assert m.counters["crc_errors"] == 3
    m.receive_data(encode_frame("D", 0, 0, LONG, fcs32=True), 1.0)
    assert [e.image for e in m.events() if isinstance(e, MessageReceived)] == [LONG]


@pytest.mark.timeout(10)
def test_frames_behind_the_signon_in_the_same_bytes_are_checked_as_agreed():
    """The answering end goes UP on S and sends T and its held long frames at once: the initiator
    takes them in one read and checks the D frames with the CRC-32 the T agreed."""
    a, b = AsyncLine("AA", "BB", max_message=4096), AsyncLine("BB", "AA", max_message=4096)
    b.send(make_images("BB", "AA", 1, 300)[0])  # held from before: it goes first
    a.start(0.0)
    b.receive_data(a.data_to_send(), 0.0)
    wire = b.data_to_send()
    assert [c[:1] for c in frames(wire)] == [b"T", b"D"] and fcs32_ok(frames(wire)[1])
    a.receive_data(wire, 0.0)
    assert len([e for e in a.events() if isinstance(e, MessageReceived)]) == 1 and a.counters["crc_errors"] == 0


# --- segment size -----------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_segment_size_shrinks_under_noise_and_grows_back_on_a_clean_line():
    ch = Channel(3, ber=1.25e-4, baud=115200, latency=0.003)  # 1e-3 of the bytes damaged
    kw = dict(max_message=4096, baud=115200, fec=False)  # with parity long frames would pay (below)
    h = up_pair(kw, kw, ch)
    m = h["a"].machine
    start = m.segment_size()
    assert 128 <= start < 4096  # a new line is not trusted with long frames yet
    noisy = Segmenter("a", 128 * 1024)
    noisy.run(h, 5000)
    assert max(noisy.sizes[-50:]) <= 200 and m.segment_size() <= 200  # about the best for 1e-3
    ch.ab.imp.ber = 0.0  # the same Impairments both ways
    clean = Segmenter("a", 1024 * 1024, seed=1)
    clean.run(h, 5000)
    assert clean.sizes[-1] == m.segment_size() == 4096  # MAXMSG again
    grown = clean.sizes.index(4096)
    assert clean.sizes[:grown] == sorted(clean.sizes[:grown]) and grown < 250  # steadily, after ~250 kB
    h.result().check()


@pytest.mark.timeout(60)
def test_segment_size_stays_within_the_least_and_maxmsg():
    ch = Channel(5, ber=3e-4, baud=9600)  # bad for long frames
    h = up_pair(dict(max_message=100), dict(max_message=100), ch)
    g = Segmenter("a", 8 * 1024)
    g.run(h, 20000)
    assert set(g.sizes) == {100}  # MAXMSG below the least: MAXMSG
    h.result().check()


NOISE = dict(ber=2e-5, drop=0.01, dup=0.01, drop_bytes=1e-5, delay=0.02, delay_time=0.5, chunk=512,
             baud=38400, latency=0.01)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed,secret,old_peer", [(1, None, False), (2, b"s" * 16, False), (3, None, True)])
def test_segments_arrive_exactly_once_in_order_both_ways_under_noise(seed, secret, old_peer):
    kw = dict(max_message=2048, baud=38400, secret=secret)
    h = up_pair(kw, dict(kw, fcs32=not old_peer), Channel(seed, **NOISE))
    ga, gb = Segmenter("a", 256 * 1024, seed=seed), Segmenter("b", 128 * 1024, seed=seed)
    ga.run(h, 20000, gb)
    h.result().check()
    got = b"".join(i[18:] for i in h["b"].received)
    assert got == random.Random(f"{seed}/a").randbytes(256 * 1024)
    ca = h["a"].counters
    assert ca["crc_errors"] and ca["retransmissions"] and ca["internal_errors"] == 0
    assert len(set(ga.sizes)) > 3  # it did adapt
    if not old_peer:
        assert max(ga.sizes) > 256 - 28  # long frames, so CRC-32 frames, went both ways


def _efficiency(fixed: int | None, reply_timeout: float = 0.3, seed: int = 1, fec: bool = False,
                ber: float = 1.25e-5) -> tuple[float, Harness]:
    """Share of the line's byte times that carried MESSAGE bytes: 1 MiB from AA at 115200 baud,
    1e-4 of the bytes damaged (ber 1.25e-5 a bit), MAXMSG 4096; and the harness."""
    kw = dict(max_message=4096, baud=115200, reply_timeout=reply_timeout, fec=fec)
    h = up_pair(kw, kw, Channel(seed, ber=ber, baud=115200, latency=0.003))
    t0, g = h.now, Segmenter("a", 1 << 20, fixed)
    g.run(h, 5000)
    h.result().check()
    assert b"".join(i[18:] for i in h["b"].received) == random.Random("0/a").randbytes(1 << 20)
    return (1 << 20) * 10 / 115200 / (h.now - t0), h


@pytest.mark.timeout(120)
def test_adaptive_segments_beat_fixed_ones_on_a_noisy_line():
    (maxmsg, _), (least, _), (adaptive, _) = _efficiency(4096), _efficiency(128), _efficiency(None)
    assert adaptive > 1.5 * maxmsg and adaptive > least + 0.02


# --- forward error correction (FEAT=FEC) ------------------------------------------------------
@pytest.mark.timeout(180)
def test_parity_mends_damaged_frames_and_carries_more_on_a_noisy_line():
    plain, _ = _efficiency(None)
    mended, h = _efficiency(None, fec=True)
    a, b = h["a"].counters, h["b"].counters
    assert a["fec_frames"] > 200 and b["fec_mended"] > 50  # about 100 damaged bytes in 1 MiB
    assert a["retransmissions"] < 10 and mended > 0.94 and mended > plain + 0.05
    assert h["a"].machine.segment_size() > 2048  # long frames (about 600 without parity): they pay now


@pytest.mark.timeout(120)
def test_a_clean_line_sends_no_parity():
    share, h = _efficiency(None, fec=True, ber=0.0)
    assert h["a"].counters["fec_frames"] == 0 and share > 0.97


@pytest.mark.timeout(10)
@pytest.mark.parametrize("damaged", [2, 3])
def test_an_f_frame_is_mended_up_to_two_bytes_a_codeword(damaged):
    m = signed_on(fec=True)  # the S offered no FEC: an F frame is damage (its end is parity, no FCS)
    f = encode_frame("D", 0, 0, LONG, fcs32=True, fec=True)
    m.receive_data(f, 1.0)
    assert m.counters["crc_errors"] == 1 and not [e for e in m.events() if isinstance(e, MessageReceived)]
    m = AsyncLine("BB", "AA", max_message=4096)
    m.receive_data(encode_frame("S", body=SignOn("AA", 8, 4096, "0000abcd", features=("FCS32", "FEC")).encode()), 0.0)
    hurt = bytearray(f)
    for k in range(damaged):  # in the first codeword, after the flag and KIND SEQ ACK
        hurt[10 + 40 * k] ^= 0x04
    m.receive_data(bytes(hurt), 1.0)
    got = [e.image for e in m.events() if isinstance(e, MessageReceived)]
    if damaged == 2:
        assert got == [LONG] and m.counters["fec_mended"] == 2
        m.confirm()
        ack = frames(m.data_to_send())[-1]  # A says what was mended: 2
        assert ack[:4] == b"A\x00\x01\x02"
    else:
        assert got == [] and m.counters["crc_errors"] == 1


@pytest.mark.timeout(10)
def test_f_frame_byte_for_byte():
    """As docs/PROTOCOL.md shows it: the D frame of test_fcs32 as an F frame."""
    img = encode("BBQ", "AAP", 1, 0, bytes(240))
    frame = encode_frame("D", 0, 0, img, fcs32=True, fec=True)
    content = unstuff(frame[1:-1])
    crc = zlib.crc32(b"F\x00\x00" + img).to_bytes(4, "little")
    assert content == b"F\x00\x00" + img[:248] + bytes.fromhex("25 85 46 50") + img[248:] + crc \
        + bytes.fromhex("97 aa 30 28")
    assert crc == bytes.fromhex("2f da 0f df") and frame == b"\x7e" + content + b"\x7e"  # nothing to stuff


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", [1, 3])
def test_a_long_reply_timeout_costs_little_on_a_noisy_line(seed):
    """Lost copies and R are asked for again after about a round trip, so the default reply
    timeout of 3 s carries about as much as 0.3 s (before: 0.66 and 0.72 of the line)."""
    assert _efficiency(None, reply_timeout=3.0, seed=seed)[0] > 0.8


# --- the reply timer of the frames in use ---------------------------------------------------
@pytest.mark.timeout(10)
def test_reply_timer_follows_the_frames_in_use_not_maxmsg():
    kw = dict(max_message=4096, baud=1200, retry_limit=1, keepalive=1000.0)
    h = up_pair(kw, kw)
    a = h["a"].machine
    h.channel.disconnect()
    t0 = h.now
    h.send("a", make_images("AA", "BB", 8, 128))
    h.run_for(25)
    assert a.counters["timeouts"] == 1
    assert a.next_deadline() - t0 == pytest.approx(2 * (2 * 8 * 153 * 10 / 1200 + 0.25), abs=0.01)  # not 549 s


@pytest.mark.timeout(10)
def test_a_long_frame_arriving_holds_the_reply_timer():
    m = signed_on(baud=9600)
    m.send(make_images("BB", "AA", 1, 10)[0])
    m.data_to_send()
    deadline = m.next_deadline()
    long = encode_frame("D", 0, 0, make_images("AA", "BB", 1, 4000)[0], fcs32=True)
    m.receive_data(long[:3000], deadline - 0.1)  # the peer's long frame, under way
    m.handle_timeout(deadline)
    assert m.counters["timeouts"] == 0 and m.next_deadline() > deadline + 5
    m.receive_data(long[3000:], deadline + 1.0)
    assert [e for e in m.events() if isinstance(e, MessageReceived)]


@pytest.mark.timeout(60)
def test_a_peer_that_does_not_offer_fec_sees_the_line_unchanged(monkeypatch):
    """On the same noisy line, AA offering FEC to a BB that does not writes byte for byte what an
    AA that never offered it writes: no F frames, no count in A. The sign-on's SESSION is the same
    in both runs: with a random one the two runs differed now and then (4 of 100 fresh processes
    failed, probably a sign-on frame one stuffed byte longer, which moves where the noise falls)."""
    import itertools
    writes = {}
    for offers in (True, False):
        sessions = itertools.count(1)  # the machines' random source, the same in both runs
        kw = dict(max_message=4096, baud=115200, random_bytes=lambda n: next(sessions).to_bytes(n, "big"))
        h = up_pair(dict(kw, fec=offers), dict(kw, fec=False), Channel(7, ber=1.25e-5, baud=115200))
        wire_a, wire_b = tap(h, "a"), tap(h, "b")
        Segmenter("a", 256 * 1024).run(h, 5000)
        h.result().check()
        writes[offers] = (b"".join(wire_a), b"".join(wire_b))
        assert h["b"].counters["crc_errors"] and h["a"].counters["fec_frames"] == 0
    assert writes[True] == writes[False]


def test_lines_alike_share_the_search_for_their_segment_size(monkeypatch):
    """A clean line's error rate falls a step about every frame, and each step was a search
    (best_choice): a hub's lines, or a simulated network's thousand, searched the same steps each.
    A line now takes what a line alike found; a line unlike (another baud) searches its own."""
    from linedrivers import async_line
    searches = []
    search = async_line.best_choice
    monkeypatch.setattr(async_line, "best_choice", lambda *a: searches.append(a) or search(*a))
    monkeypatch.setattr(async_line, "_CHOICES", {})

    def sizes(m: AsyncLine) -> list[int]:
        out = []
        for _ in range(80):
            m._errors.exposed(300, 300)  # a clean frame's evidence
            out.append(m.segment_size())
        return out
    first = sizes(signed_on())
    searched = len(searches)
    assert searched > 20 and sizes(signed_on()) == first and len(searches) == searched
    sizes(signed_on(baud=1200))
    assert len(searches) > searched
