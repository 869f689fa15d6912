"""Frame abort (FEAT=ABORT, docs/PROTOCOL.md): an image of higher priority cuts short the frame of
lower priority being sent, takes its SEQ, and the cut image goes again after it; a peer that does
not offer ABORT sees the protocol unchanged. Two AsyncLine machines on a paced in-memory line."""
from __future__ import annotations

import pytest

from linedrivers import AsyncLine
from linedrivers.async_frames import ABORT_BYTES, Deframer, encode_frame
from linedrivers.image import encode
from mccs.testbed.linesim import Channel, Harness, make_images

pytestmark = pytest.mark.timeout(20)

BAUD = 9600
URGENT = encode("BBQ", "AAP", 9000, 0, b"urgent")


def up_pair(a: dict, b: dict) -> Harness:
    h = Harness(lambda: AsyncLine("AA", "BB", baud=BAUD, **a), lambda: AsyncLine("BB", "AA", baud=BAUD, **b),
                channel=Channel(baud=BAUD))
    assert h.run(10, stop=lambda h: h["a"].up and h["b"].up)
    return h


def tap(h: Harness) -> list[bytes]:
    """Everything side a writes from now on, write by write."""
    pipe, wire = h.channel.outof("a"), []
    write = pipe.write
    pipe.write = lambda data, now: (wire.append(bytes(data)), write(data, now))
    return wire


def urgent_behind_bulk(a: dict, b: dict) -> tuple[Harness, list[bytes], list[bytes]]:
    """Six 120-byte images (156 ms frames at 9600 baud), then, 0.22 s on (the second frame partly
    handed), one of priority 7."""
    h = up_pair(a, b)
    wire = tap(h)
    bulk = make_images("AA", "BB", 6, 120)
    h.send("a", bulk)
    h.run_for(0.22)
    h.send("a", [URGENT], priority=7)
    assert h.run(10, stop=lambda h: len(h["b"].received) == len(h["a"].acked) == 7)
    return h, bulk, wire


def test_an_urgent_image_cuts_the_frame_on_the_wire_short_and_takes_its_seq():
    h, bulk, wire = urgent_behind_bulk(dict(abort=True), dict(abort=True))
    got = h["b"].received
    k = got.index(URGENT)
    assert got == bulk[:k] + [URGENT] + bulk[k:] and 0 < k < len(bulk)  # it passed the frame being sent
    a, b = h["a"].machine.counters, h["b"].machine.counters
    assert a["aborts"] == b["aborts_rx"] == 1
    assert not (b["crc_errors"] or b["garbage"] or a["retransmissions"] or b["duplicates"])
    assert h["a"].acked and sorted(h["a"].acked) == sorted([*bulk, URGENT])
    # on the wire: the start of bulk[k]'s frame, ESC FLAG, then the urgent frame under the SEQ it had
    stream = b"".join(wire)
    assert stream.count(ABORT_BYTES) == 1
    cut = stream.index(ABORT_BYTES)
    start = stream.rindex(b"\x7e", 0, cut)
    frame_k = encode_frame("D", k, stream[start + 3], bulk[k])  # as it began: SEQ k, the ACK it carried
    assert frame_k.startswith(stream[start:cut]) and len(stream[start:cut]) < len(frame_k)
    assert stream[cut + 2:cut + 5] == b"\x7eD" + bytes((k,))  # the urgent frame follows at once, SEQ k
    assert stream.count(b"\x7eD" + bytes((k,))) >= 2  # and bulk[k] went again after it, SEQ k+1


def test_writes_are_paced_only_while_abort_is_agreed():
    """Paced: a frame longer than `pace` on the wire (all of these at 9600) goes in pieces that keep
    the port about `pace` ahead of the wire (76 bytes)."""
    h, _, wire = urgent_behind_bulk(dict(abort=True), dict(abort=True))
    piece = int(h["a"].machine.pace * BAUD / 10)
    assert len(wire) > 2 * 7 and max(map(len, wire)) <= 2 * piece and sorted(map(len, wire))[len(wire) // 2] <= piece
    h, _, wire = urgent_behind_bulk(dict(abort=True), dict())
    assert max(map(len, wire)) > 150  # whole frames, as without the feature


@pytest.mark.parametrize("peer", [dict(), dict(selective_repeat=False)])
def test_a_peer_that_does_not_offer_abort_sees_the_protocol_unchanged(peer):
    """AA offers ABORT, BB does not: AA writes byte for byte what an AA that never offered it writes."""
    runs = {}
    for offers in (True, False):
        h, bulk, wire = urgent_behind_bulk(dict(abort=offers), peer)
        assert h["a"].machine.counters["aborts"] == 0 and ABORT_BYTES not in b"".join(wire)
        runs[offers] = b"".join(wire), h["b"].received
    assert runs[True] == runs[False]


def test_an_urgent_image_passes_the_images_not_yet_sent_but_never_one_sent_before():
    """Without ABORT it waits for the frame on the wire, then goes before the rest; the images of
    one priority keep their order."""
    h, bulk, _ = urgent_behind_bulk(dict(abort=True), dict())
    got = h["b"].received
    k = got.index(URGENT)
    assert got == bulk[:k] + [URGENT] + bulk[k:]


def test_the_deframer_drops_an_aborted_frame_as_damage_unless_abort_is_agreed():
    cut = encode_frame("D", 3, 0, bytes(40))[:20] + ABORT_BYTES
    for agreed, counted in ((True, "aborts_rx"), (False, "garbage")):
        counters = dict.fromkeys(("garbage", "oversized", "crc_errors", "bad_frames", "aborts_rx"), 0)
        d = Deframer(1000, counters)
        d.abort = agreed
        frames = list(d.feed(cut + encode_frame("A", 0, 1)))
        assert [f.kind for f in frames] == ["ABORT" if agreed else "?", "A"] and frames[0].content is None
        assert counters[counted] > 0 and sum(counters.values()) == counters[counted]


@pytest.mark.parametrize("seed", range(4))
def test_on_a_noisy_line_cut_frames_and_damaged_aborts_lose_and_double_nothing(seed):
    """Bit errors hit the cut frames, the ESC FLAG after them and the urgent frames alike: every
    image arrives once, and each priority's images in their order."""
    h = Harness(lambda: AsyncLine("AA", "BB", baud=BAUD, abort=True, reply_timeout=1.0),
                lambda: AsyncLine("BB", "AA", baud=BAUD, abort=True, reply_timeout=1.0),
                channel=Channel(seed, baud=BAUD, ber=1e-4))
    assert h.run(30, stop=lambda h: h["a"].up and h["b"].up)
    bulk = make_images("AA", "BB", 40, 120, seed=seed)
    urgent = make_images("AA", "BB", 8, 10, seed=seed, first_msg_id=5000)
    h.send("a", bulk)
    for i, img in enumerate(urgent):
        h.at(h.now + 0.4 + 0.53 * i, lambda h, img=img: h.send("a", [img], priority=7))
    assert h.run(h.now + 300, stop=lambda h: len(h["b"].received) == len(bulk) + len(urgent))
    got = h["b"].received
    assert sorted(got) == sorted(bulk + urgent) and h["b"].duplicates == 0
    assert [m for m in got if m in bulk] == bulk and [m for m in got if m in urgent] == urgent
    a, b = h["a"].machine.counters, h["b"].machine.counters
    assert a["aborts"] >= 1 and b["crc_errors"] + b["garbage"] > 0  # cut, and damaged
