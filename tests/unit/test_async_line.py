"""AsyncLine (docs/DESIGN.md 4.1): known answers, sign-on, window, timers, busy, restarts, noisy lines."""
import collections
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linedrivers import AsyncLine
from linedrivers.async_frames import STUFFED, XONXOFF_STUFFED, Deframer
from linedrivers.async_line import SignOn, encode_frame, stuff, unstuff
from linedrivers.crc import x25
from linedrivers.events import (FrameTraced, LineDown, LineEvent, LineUp, MessageAcked,
                                MessageReceived)
from linedrivers.image import encode
from mccs.testbed.linesim import Channel, Harness, make_images, run_pair


def x25_bitwise(data: bytes) -> int:
    """An independent oracle: CRC-16/X-25 bit by bit (reflected 0x1021, init and xorout 0xFFFF)."""
    crc = 0xFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x8408 if crc & 1 else crc >> 1
    return crc ^ 0xFFFF


def factories(a="AA", b="BB", **kw):
    return (lambda: AsyncLine(a, b, **kw)), (lambda: AsyncLine(b, a, **kw))


def up_pair(channel=None, **kw) -> Harness:
    h = Harness(*factories(**kw), channel=channel or Channel())
    assert h.run(10, stop=lambda h: h["a"].up and h["b"].up)
    return h


def events_of(h, side, kind):
    return [(t, e) for t, s, e in h.events if s == side and isinstance(e, kind)]


def signed_on_receiver(**kw) -> AsyncLine:
    """A machine UP with peer AA, signed on by an S with a fixed session (SEQ state 0)."""
    m = AsyncLine("BB", "AA", **kw)
    m.receive_data(encode_frame("S", body=SignOn("AA", 8, 128, "0000abcd").encode()), 0.0)
    assert isinstance(m.events()[-1], LineUp)
    m.data_to_send()
    return m


# --- known answers -----------------------------------------------------------------------------
@pytest.mark.timeout(10)
def test_x25_check_value():
    assert x25(b"123456789") == 0x906E == x25_bitwise(b"123456789")


@pytest.mark.timeout(10)
def test_data_frame_byte_for_byte():
    img = encode("BBQ", "AAP", 0x7E7D, 0x1111, b"hi")  # MSG_ID 7E 7D must be stuffed
    frame = bytes.fromhex("7e 44 05 03 42 42 51 20 20 20 41 41 50 20 20 20 7d 5e 7d 5d 11 11"
                          " 00 02 68 69 13 6c 7e")
    assert x25_bitwise(b"D\x05\x03" + img) == 0x6C13
    assert encode_frame("D", 5, 3, img) == frame
    # with xonxoff_safe the 11s of USER_ID and the 13 of the FCS are escaped as well
    xon = encode_frame("D", 5, 3, img, (0x7D, 0x7E, 0x11, 0x13, 0x91, 0x93))
    assert xon == bytes.fromhex("7e 44 05 03 42 42 51 20 20 20 41 41 50 20 20 20 7d 5e 7d 5d 7d 31"
                                " 7d 31 00 02 68 69 7d 33 6c 7e")
    # and a machine sends exactly that frame as SEQ 0 with its ACK field
    m = signed_on_receiver()
    m.send(img)
    assert m.data_to_send() == encode_frame("D", 0, 0, img)


@pytest.mark.timeout(10)
def test_ack_frame_byte_for_byte_and_only_after_confirm():
    assert encode_frame("A", 0, 5) == bytes.fromhex("7e 41 00 05 cb cd 7e")
    m = signed_on_receiver()
    m.receive_data(encode_frame("D", 0, 0, make_images("AA", "BB", 1, 10)[0]), 1.0)
    assert m.data_to_send() == b""  # not durable yet: no acknowledgement
    assert isinstance(m.events()[-1], MessageReceived)
    m.confirm()
    assert m.data_to_send() == bytes.fromhex("7e 41 00 01") + x25_bitwise(b"A\x00\x01").to_bytes(2, "little") + b"\x7e"


@pytest.mark.timeout(10)
def test_unconfirmed_room_is_the_window_less_what_waits_for_confirm():
    """What the daemon may let wait for the next frame (its streaming hold): the frames the peer
    may still send before it needs an acknowledgement; none while busy."""
    from linedrivers import BscLine
    m = signed_on_receiver(window=4)
    assert m.unconfirmed_room() == 4
    for seq, img in enumerate(make_images("AA", "BB", 3, 10)):
        m.receive_data(encode_frame("D", seq, 0, img), 1.0)
    m.events()
    assert m.unconfirmed_room() == 1
    m.confirm()
    assert m.unconfirmed_room() == 4
    m.set_busy(True)
    assert m.unconfirmed_room() == 0
    assert AsyncLine("AA", "BB").unconfirmed_room() == 0  # not signed on
    assert BscLine("AA", "BB", role="primary").unconfirmed_room() == 0  # stop-and-wait


@pytest.mark.timeout(10)
def test_signon_frames_byte_for_byte():
    body = b"MCCS/1 HOST=AA WINDOW=8 MAXMSG=128"
    assert SignOn("AA", 8, 128).encode() == body
    assert encode_frame("S", body=body) == b"\x7eS\x00\x00" + body + bytes.fromhex("ca ef 7e")
    # the reply T carries the answering host's own values and echoes the S's SESSION
    # docs/DESIGN.md 4.1, then with the features offered
    for sr, feat in ((False, b""), (True, b" FEAT=SREJ,FCS32,FEC")):
        m = AsyncLine("BB", "AA", window=4, max_message=100, selective_repeat=sr)
        m.receive_data(encode_frame("S", body=SignOn("AA", 8, 128, "0000abcd").encode()), 0.0)
        t_body = b"MCCS/1 HOST=BB WINDOW=4 MAXMSG=100 SESSION=0000abcd" + feat
        assert m.data_to_send() == (b"\x7eT\x00\x00" + t_body
                                    + x25_bitwise(b"T\x00\x00" + t_body).to_bytes(2, "little") + b"\x7e")
    # start() sends S with its own values and a fresh SESSION
    a = AsyncLine("AA", "BB", selective_repeat=False)
    a.start(0.0)
    s = a.data_to_send()
    assert s == encode_frame("S", body=SignOn("AA", 8, 128, a.session).encode()) and len(a.session) == 8


@pytest.mark.timeout(10)
@given(st.binary(max_size=300), st.booleans())
def test_stuffing_round_trips_and_hides_flags(data, xonxoff):
    special = (0x7D, 0x7E, 0x11, 0x13, 0x91, 0x93) if xonxoff else (0x7D, 0x7E)
    stuffed = stuff(data, special)
    assert unstuff(stuffed) == data
    assert not set(stuffed) & set(special) - {0x7D}


# --- sign-on -----------------------------------------------------------------------------------
@pytest.mark.timeout(10)
def test_signon_and_window_negotiation():
    h = Harness(lambda: AsyncLine("AA", "BB", window=8, max_message=128),
                lambda: AsyncLine("BB", "AA", window=3, max_message=64), start=("a",))
    assert h.run(10, stop=lambda h: h["a"].up and h["b"].up)
    a, b = h["a"].machine, h["b"].machine
    assert a.room() == b.room() == 6  # 2 x the window in force, min(8, 3)
    assert a.counters["signons"] == b.counters["signons"] == 1
    with pytest.raises(ValueError):
        a.send(make_images("AA", "BB", 1, 65)[0])  # MAXMSG in force is min(128, 64)
    a.send(make_images("AA", "BB", 1, 64)[0])
    kinds = [(s, e.dir, e.kind) for _, s, e in h.events if isinstance(e, FrameTraced)]
    assert kinds[:2] == [("a", "tx", "S"), ("b", "rx", "S")] and ("a", "rx", "T") in kinds


@pytest.mark.timeout(10)
def test_both_ends_signing_on_at_once_reset_once():
    h = up_pair()
    h.send("a", make_images("AA", "BB", 20))
    h.send("b", make_images("BB", "AA", 20))
    assert h.run(60)
    h.result().check()
    assert not h["a"].downs and not h["b"].downs and h["a"].ups == h["b"].ups == 1


@pytest.mark.timeout(10)
def test_repeated_signon_after_a_lost_reply_does_not_reset_the_answering_end():
    a, b = AsyncLine("AA", "BB"), AsyncLine("BB", "AA")
    img = make_images("BB", "AA", 1)[0]
    a.start(0.0)
    b.receive_data(a.data_to_send(), 0.1)
    b.send(img)
    b.data_to_send()                    # T and D0: both lost on the line
    a.handle_timeout(a.next_deadline())  # a repeats its S (same SESSION)
    b.receive_data(a.data_to_send(), 3.1)
    a.receive_data(b.data_to_send(), 3.2)  # the T again: a is up
    b.handle_timeout(b.next_deadline())    # D0 goes again
    a.receive_data(b.data_to_send(), 3.3)
    a_events, b_events = a.events(), b.events()
    assert [e.image for e in a_events if isinstance(e, MessageReceived)] == [img]
    assert not [e for e in a_events + b_events if isinstance(e, LineDown)]
    assert a.state == b.state == "UP" and a.counters["signons"] == b.counters["signons"] == 1
    a.confirm()
    b.receive_data(a.data_to_send(), 3.4)
    assert [e.image for e in b.events() if isinstance(e, MessageAcked)] == [img]


@pytest.mark.timeout(10)
def test_busy_outlives_a_new_signon():
    m = signed_on_receiver()
    m.set_busy(True)
    m.receive_data(encode_frame("S", body=SignOn("AA", 8, 128, "00000002").encode()), 1.0)
    m.receive_data(encode_frame("D", 0, 0, make_images("AA", "BB", 1)[0]), 1.0)
    assert [type(e) for e in m.events() if not isinstance(e, FrameTraced)] == [LineDown, LineUp]
    assert m.data_to_send().endswith(encode_frame("B", 0, 0)) and m.counters["busy_drops"] == 1


@pytest.mark.timeout(10)
def test_signon_from_wrong_host_is_refused():
    h = Harness(lambda: AsyncLine("AA", "BB"), lambda: AsyncLine("CC", "XX"), start=("a",), backoff=100)
    h.run_for(5)
    assert h["b"].refused == ["AA"] and not h["b"].up and h["b"].ups == 0
    assert h["a"].downs == ["refused"] and h["a"].ups == 0
    assert [e.kind for _, e in events_of(h, "b", FrameTraced) if e.dir == "tx"] == ["O"]


@pytest.mark.timeout(10)
def test_reply_from_wrong_host_is_refused():
    # CC will talk to AA, but AA's line is configured for BB: AA refuses CC's T
    h = Harness(lambda: AsyncLine("AA", "BB"), lambda: AsyncLine("CC", "AA"), start=("a",), backoff=100)
    h.run_for(5)
    assert h["a"].refused == ["CC"] and h["a"].downs == ["wrong peer"]
    assert h["b"].downs == ["refused"]


@pytest.mark.timeout(10)
def test_bad_signons_are_dropped_and_counted():
    m = AsyncLine("BB", "AA")
    for body in (b"MCCS/2 HOST=AA WINDOW=8 MAXMSG=128", b"MCCS/1 HOST=AA WINDOW=0 MAXMSG=128",
                 b"MCCS/1 HOST=A WINDOW=8 MAXMSG=128", b"MCCS/1 WINDOW=8", b"\xff\xfe", b""):
        m.receive_data(encode_frame("S", body=body), 0.0)
    assert m.counters["bad_frames"] == 6 and m.state == "DOWN" and m.data_to_send() == b""
    assert not [e for e in m.events() if not isinstance(e, FrameTraced)]


# --- timers and retries ------------------------------------------------------------------------
@pytest.mark.timeout(10)
@pytest.mark.parametrize("baud,window,base,expect", [
    (9600, 1, 3.0, 3.0), (9600, 8, 3.0, 3.0), (1200, 8, 3.0, 2 * 8 * 153 * 10 / 1200 + 0.25),
    (115200, 8, 0.3, 2 * 8 * 153 * 10 / 115200 + 0.25), (115200, 1, 0.3, 0.3)])
def test_retry_limit_takes_the_line_down_with_unacked_in_order(baud, window, base, expect):
    h = up_pair(baud=baud, window=window, retry_limit=3, reply_timeout=base, keepalive=1000.0)  # no silence rule
    imgs = make_images("AA", "BB", 2 * window)
    h.channel.disconnect()
    t0 = h.now
    h.send("a", imgs)
    h.run_for(5 * expect)
    (t_down, down), *_ = events_of(h, "a", LineDown)
    assert down.reason == "retry limit" and down.unacked == imgs
    timeouts = [t for t, e in events_of(h, "a", LineEvent) if e.kind == "timeout"]
    assert len(timeouts) == 4  # the first try and 3 retries
    # the reply timeout is the base, raised to 2 x the window's time on the wire (153-byte
    # frames of 128-byte messages, 10 bits a byte) + 0.25 s
    assert timeouts[0] - t0 == pytest.approx(expect, abs=0.01)
    assert t_down == pytest.approx(t0 + 4 * expect, abs=0.05)
    retries = [e.detail for _, e in events_of(h, "a", LineEvent) if e.kind == "retry"]
    assert len(retries) == 3 and h["a"].machine.counters["retransmissions"] == 3 * window


@pytest.mark.timeout(10)
def test_a_line_that_brings_no_byte_is_down_after_two_keepalives_before_the_retry_limit():
    h = up_pair(baud=9600, window=8, retry_limit=7, reply_timeout=1.0, keepalive=2.0)
    imgs = make_images("AA", "BB", 8)
    h.channel.disconnect()
    t0 = h.now
    h.send("a", imgs)
    h.run_for(30)
    (t_down, down), *_ = events_of(h, "a", LineDown)
    assert down.reason.startswith("silent line") and down.unacked == imgs
    timeout = 2 * 8 * 153 * 10 / 9600 + 0.25  # 2.8 s: 7 retries would take 22 s
    assert t_down - t0 == pytest.approx(max(2 * 2.0, 2 * timeout), abs=0.05)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("noise,reason", [(False, "silent line"), (True, "retry limit")])
def test_damaged_bytes_show_a_live_line_so_then_the_retries_decide(noise, reason):
    h = up_pair(baud=9600, window=1, retry_limit=2, reply_timeout=1.0, keepalive=0.5)
    h.channel.disconnect()
    t0 = h.now
    if noise:  # bytes from the peer's side every 0.2 s, never a good frame
        for k in range(1, 40):
            h.at(t0 + 0.2 * k, lambda h: h["a"].machine.receive_data(b"\x55\xaa", h.now))
    h.send("a", make_images("AA", "BB", 1))
    h.run_for(8)
    (t_down, down), *_ = events_of(h, "a", LineDown)
    assert down.reason.startswith(reason)
    assert t_down - t0 == pytest.approx(2.0 if not noise else 3.0, abs=0.05)  # 2 x 1 s of silence; 3 timeouts


@pytest.mark.timeout(10)
@pytest.mark.parametrize("retry_limit,reason,most", [(7, "silent line", 30 + 2 * 3.0), (0, "dead line", 30 + 3.0)])
def test_keepalive_and_dead_line(retry_limit, reason, most):
    """An idle line cut: its keep-alive goes unanswered. With the defaults it is down two reply
    timeouts after that (the silence rule: 36 s after the last byte); with no retries, at the
    first reply timeout."""
    h = up_pair(keepalive=30.0, retry_limit=retry_limit)
    h.run_for(95)
    p_tx = [t for t, s, e in h.events if isinstance(e, FrameTraced) and e.kind == "P" and e.dir == "tx"]
    assert 3 <= len(p_tx) <= 6 and p_tx[0] == pytest.approx(30, abs=0.1)  # at most one P per side per 30 s
    assert not h["a"].downs and not h["b"].downs
    assert h["a"].machine.counters["keepalives"] + h["b"].machine.counters["keepalives"] == len(p_tx)
    h.channel.disconnect()
    t0 = h.now
    h.run_for(45)
    (t_a, down), = events_of(h, "a", LineDown)[:1]
    assert down.reason.startswith(reason) and t0 + 30 - 3 < t_a <= t0 + most + 0.1


@pytest.mark.timeout(10)
def test_busy_holds_the_sender_and_resumes():
    imgs = make_images("AA", "BB", 60)
    res = run_pair(*factories(), imgs, channel=Channel(baud=9600), recv_capacity=4, drain_rate=5.0)
    res.check()
    b_tx = [e.kind for e in res.of("b", FrameTraced) if e.dir == "tx"]
    a_tx = [e.kind for e in res.of("a", FrameTraced) if e.dir == "tx"]
    assert b_tx.count("B") >= 5 and "A" in b_tx
    assert res.time >= 55 / 5.0  # paced by the consumer, not the line
    assert not res.a.downs and res.a.counters["timeouts"] <= a_tx.count("P")


@pytest.mark.timeout(10)
def test_busy_receiver_answers_a_poll_with_b():
    m = signed_on_receiver()
    m.set_busy(True)
    assert m.data_to_send() == encode_frame("B", 0, 0)
    m.receive_data(encode_frame("P"), 1.0)
    assert m.data_to_send() == encode_frame("B", 0, 0)
    m.receive_data(encode_frame("D", 0, 0, make_images("AA", "BB", 1)[0]), 2.0)
    assert not [e for e in m.events() if isinstance(e, MessageReceived)]
    assert m.counters["busy_drops"] == 1 and m.data_to_send() == encode_frame("B", 0, 0)
    m.set_busy(False)
    assert m.data_to_send() == encode_frame("A", 0, 0)


@pytest.mark.timeout(10)
def test_peer_restart_hands_back_and_delivers_once():
    ma, mb = make_images("AA", "BB", 200), make_images("BB", "AA", 200)
    h = Harness(*factories(), channel=Channel(baud=9600, latency=0.005))
    h.send("a", ma)
    h.send("b", mb)
    h.at(5.0, lambda h: h.restart("b"))
    assert h.run(600, settle=2)
    h.result().check()
    assert "peer restarted" in h["a"].downs and h["b"].restarts == 1
    assert h["a"].ups == 2 and h["b"].duplicates + h["a"].duplicates > 0


@pytest.mark.timeout(10)
def test_stop_signs_off():
    h = up_pair()
    h.stop("a")
    h.run_for(10)
    assert h["a"].downs == ["stopped"] and h["b"].downs == ["peer signed off"]
    assert h["b"].ups == 2 and h["a"].up  # b signs on again, and a stopped machine still answers


# --- bad input ---------------------------------------------------------------------------------
@pytest.mark.timeout(10)
def test_receiver_drops_and_counts_bad_frames():
    imgs = make_images("AA", "BB", 3, 20)
    d0 = encode_frame("D", 0, 0, imgs[0])
    m = signed_on_receiver()
    m.receive_data(b"noise\x7d" + d0[:-1], 1.0)             # garbage, then a frame (hunt for its flag)
    m.receive_data(b"\x7e" + d0[1:5] + b"\x00" + d0[6:], 1.0)  # the same with a byte hit: bad FCS
    m.receive_data(d0, 1.0)                                  # a duplicate of SEQ 0
    m.receive_data(encode_frame("D", 100, 0, imgs[1]), 1.0)  # SEQ far outside the window
    m.receive_data(encode_frame("D", 1, 0, imgs[1] + b"x" * 200), 1.0)  # over MAXMSG
    m.receive_data(encode_frame("D", 1, 0, imgs[1][:-1]), 1.0)  # FCS right, image broken: damage, not taken
    m.receive_data(encode_frame("Z", 1, 0), 1.0)            # unknown kind
    m.receive_data(encode_frame("D", 2, 0, imgs[2]), 1.0)  # after a gap (go-back-N: dropped, N sent)
    assert [e.image for e in m.events() if isinstance(e, MessageReceived)] == [imgs[0]]
    m.receive_data(encode_frame("D", 1, 0, imgs[1]) + encode_frame("D", 2, 0, imgs[2]), 1.0)  # sent again
    got = [e.image for e in m.events() if isinstance(e, MessageReceived)]
    c = m.counters
    assert got == [imgs[1], imgs[2]]
    assert c["garbage"] == 6 and c["crc_errors"] == 1 and c["duplicates"] == 1
    assert c["out_of_window"] == 1 and c["oversized"] == 1 and c["bad_frames"] == 2
    assert c["internal_errors"] == 0


@pytest.mark.timeout(10)
def test_frames_are_traced():
    m = signed_on_receiver()
    img = make_images("AA", "BB", 1, 5, first_msg_id=77)[0]
    frame = encode_frame("D", 0, 0, img)
    m.receive_data(frame, 1.0)
    m.receive_data(frame[:10] + bytes([frame[10] ^ 1]) + frame[11:], 1.0)
    m.send(make_images("BB", "AA", 1, 5, first_msg_id=9)[0])
    m.events()
    m.confirm()
    out = m.data_to_send()
    tr = [e for e in m.events() if isinstance(e, FrameTraced)]
    assert [(e.dir, e.kind, e.ok, e.seq, e.origin, e.msg_id) for e in tr] == [
        ("tx", "D", True, 0, "BB", 9)]
    assert tr[0].nbytes == len(out)
    m2 = signed_on_receiver()
    m2.receive_data(frame + frame[:10] + bytes([frame[10] ^ 1]) + frame[11:], 1.0)
    tr = [e for e in m2.events() if isinstance(e, FrameTraced)]
    assert [(e.dir, e.kind, e.nbytes, e.ok, e.seq, e.origin, e.msg_id) for e in tr] == [
        ("rx", "D", len(frame), True, 0, "AA", 77), ("rx", "D", len(frame), False, None, None, None)]


@pytest.mark.timeout(60)
@settings(max_examples=150)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_never_raise(data):
    m = signed_on_receiver()
    m.receive_data(data, 1.0)
    m.handle_timeout(100.0)
    m.data_to_send()
    evs = m.events()
    assert m.counters["internal_errors"] == 0
    assert len([e for e in evs if isinstance(e, MessageReceived)]) <= 1


_IMGS = make_images("AA", "BB", 12, 40, random_size=True)
_STREAM = b"".join(encode_frame("D", i, 0, img) for i, img in enumerate(_IMGS))

corruption = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, len(_STREAM) * 8 - 1)),
    st.tuples(st.just("drop"), st.integers(0, len(_STREAM) - 1), st.integers(1, 40)),
    st.tuples(st.just("dup"), st.integers(0, len(_STREAM) - 1), st.integers(1, 200)),
    st.tuples(st.just("insert"), st.integers(0, len(_STREAM) - 1), st.binary(min_size=1, max_size=8)),
)


def _corrupt(stream: bytes, ops) -> bytes:
    buf = bytearray(stream)
    for op in ops:
        at = op[1] % max(1, len(buf) * (8 if op[0] == "flip" else 1))
        if op[0] == "flip":
            buf[at >> 3] ^= 1 << (at & 7)
        elif op[0] == "drop":
            del buf[at:at + op[2]]
        elif op[0] == "dup":
            buf[at:at] = buf[at:at + op[2]]
        else:
            buf[at:at] = op[2]
    return bytes(buf)


@pytest.mark.timeout(120)
@settings(max_examples=200)
@given(st.lists(corruption, max_size=6), st.lists(st.integers(1, 300), min_size=1, max_size=20),
       st.booleans())
def test_corrupted_frames_never_deliver_twice_or_out_of_order(ops, cuts, confirm_each):
    """Whatever happens to a stream of valid frames, what comes out is a prefix of what went in."""
    data = _corrupt(_STREAM, ops)
    m = signed_on_receiver(keepalive=1e6)  # stays UP however long the feeding takes
    got, pos, i = [], 0, 0
    while pos < len(data):
        n = cuts[i % len(cuts)]
        m.receive_data(data[pos:pos + n], 1.0 + i)
        pos, i = pos + n, i + 1
        got += [e.image for e in m.events() if isinstance(e, MessageReceived)]
        if confirm_each:
            m.confirm()
        m.data_to_send()
        m.handle_timeout(1.0 + i)
    m.receive_data(_STREAM, 1000.0)  # the clean stream again: only duplicates or the missing rest
    got += [e.image for e in m.events() if isinstance(e, MessageReceived)]
    assert got == _IMGS[:len(got)]
    assert m.counters["internal_errors"] == 0
    if not ops:
        assert got == _IMGS


# --- whole runs over a noisy channel -------------------------------------------------------------
NOISE = dict(ber=1e-3, drop=0.01, dup=0.01, delay=0.02, delay_time=0.5, chunk=64, baud=9600, latency=0.01)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("window", [1, 8])
def test_thousand_each_way_exactly_once_in_order_on_a_noisy_line(window):
    ma, mb = make_images("AA", "BB", 1000, random_size=True), make_images("BB", "AA", 1000, seed=1)
    res = run_pair(*factories(window=window), ma, mb, channel=Channel(seed=window, **NOISE))
    res.check()
    assert res.finished and res.a.received == mb and res.b.received == ma
    ca, cb = res.a.counters, res.b.counters
    # the noise really happened and was handled by every mechanism
    assert ca["crc_errors"] > 1000 and cb["crc_errors"] > 1000 and ca["garbage"] and cb["timeouts"]
    assert res.a.downs and "retry limit" in res.a.downs + res.b.downs
    if window > 1:
        assert ca["naks"] + cb["naks"] > 0 and ca["rejects_tx"] + cb["rejects_tx"] > 0
    assert ca["internal_errors"] == cb["internal_errors"] == 0


@pytest.mark.timeout(30)
def test_xonxoff_safe_line_never_shows_xon_xoff():
    ma = make_images("AA", "BB", 200, seed=3)
    h = Harness(*factories(xonxoff_safe=True), channel=Channel(seed=3, ber=1e-4, baud=9600))
    h.send("a", ma)
    wire = []
    h.channel.ab.write = (lambda w: lambda data, now: (wire.append(data), w(data, now)))(h.channel.ab.write)
    assert h.run(1000, settle=1)
    h.result().check()
    assert not set(b"".join(wire)) & {0x11, 0x13, 0x91, 0x93}


@pytest.mark.timeout(30)
def test_clean_line_runs_near_the_framing_ceiling():
    """Window 8 keeps a 9600-baud line busy; window 1 loses only the ACK's turn-around."""
    for window, floor in (8, 0.97), (1, 0.90):
        ma = make_images("AA", "BB", 300)
        res = run_pair(*factories(window=window), ma, channel=Channel(baud=9600, latency=0.002), settle=0)
        res.check()
        wire_time = res.a.counters["bytes_tx"] * 10 / 9600
        assert wire_time / res.time >= floor


@pytest.mark.timeout(120)
@settings(max_examples=8)  # (200 more in the slow soak below)
@given(seed=st.integers(0, 2**32), window=st.sampled_from([1, 2, 8, 127]),
       ber=st.sampled_from([0, 1e-4, 1e-3]), drop=st.sampled_from([0, 0.02]),
       dup=st.sampled_from([0, 0.05]), drop_bytes=st.sampled_from([0, 1e-3]),
       chunk=st.sampled_from([None, 17, 200]), busy=st.booleans())
def test_any_seeded_line_delivers_exactly_once_in_order(seed, window, ber, drop, dup, drop_bytes, chunk, busy):
    """Lines bad enough to go DOWN often, but not hopeless: everything arrives once, in order."""
    ma, mb = make_images("AA", "BB", 200, 60, random_size=True), make_images("BB", "AA", 200, 60, seed=2)
    channel = Channel(seed, ber=ber, drop=drop, dup=dup, drop_bytes=drop_bytes, chunk=chunk, baud=9600,
                      delay=0.02, latency=0.003)
    res = run_pair(*factories(window=window, max_message=60), ma, mb, channel=channel, until=20000,
                   recv_capacity=20 if busy else None, drain_rate=40.0 if busy else None)
    res.check()
    assert res.a.counters["internal_errors"] == res.b.counters["internal_errors"] == 0


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("trial", range(200))
def test_soak_seeded_lines_with_restarts_and_pulled_cables(trial):
    """`pytest -m slow`: 200 seeded lines, each with restarts and a cable pulled for a while."""
    import random
    r = random.Random(trial)
    ch = Channel(trial, ber=r.choice([0, 1e-4, 1e-3]), drop=r.choice([0, 0.02]), dup=r.choice([0, 0.05]),
                 drop_bytes=r.choice([0, 1e-3]), chunk=r.choice([None, 17, 64]), baud=9600,
                 delay=r.choice([0, 0.05]), latency=r.choice([0, 0.003, 0.1]))
    wa, wb = r.choice([1, 2, 8, 127]), r.choice([1, 3, 8, 16])
    h = Harness(lambda: AsyncLine("AA", "BB", window=wa, max_message=60),
                lambda: AsyncLine("BB", "AA", window=wb, max_message=60), channel=ch,
                recv_capacity=r.choice([None, 20]), drain_rate=40.0)
    h.send("a", make_images("AA", "BB", 300, 60, random_size=True, seed=trial))
    h.send("b", make_images("BB", "AA", 300, 60, seed=trial))
    for _ in range(r.randint(0, 4)):
        h.at(r.uniform(1, 60), (lambda side: lambda h: h.restart(side))(r.choice("ab")))
        t0 = r.uniform(1, 60)
        h.at(t0, lambda h: h.channel.disconnect())
        h.at(t0 + r.uniform(0, 40), lambda h: h.channel.reconnect())
    assert h.run(30000, settle=2)
    h.result().check()


# --- selective repeat (FEAT=SREJ) -------------------------------------------------------------
def _lose_data_frames(h, side: str, which: set[int], kind: bytes = b"D") -> None:
    """The n-th frames of `kind` `side` sends (counting from 1, in `which`) never arrive."""
    import re
    pipe, seen = h.channel.outof(side), [0]
    write = pipe.write

    def lossy(data, now):
        kept = []
        for frame in re.findall(rb"\x7e[^\x7e]+\x7e", bytes(data)):
            if frame[1:2] == kind:
                seen[0] += 1
                if seen[0] in which:
                    continue
            kept.append(frame)
        write(b"".join(kept), now)
    pipe.write = lossy


@pytest.mark.timeout(10)
@pytest.mark.parametrize("sr", [True, False])
def test_a_lost_frame_is_sent_again_alone_with_selective_repeat_and_with_the_window_behind_it_without(sr):
    h = up_pair(baud=9600, window=8, selective_repeat=sr)
    assert ("SREJ" in h["a"].machine.features) is sr
    imgs = make_images("AA", "BB", 8)
    _lose_data_frames(h, "a", {3})
    h.send("a", imgs)
    h.run_for(20)
    assert [e.image for _, e in events_of(h, "b", MessageReceived)] == imgs  # once each, in order
    sent_again = h["a"].machine.counters["retransmissions"]
    if sr:
        assert sent_again == 1 and h["b"].machine.counters["rejects_tx"] == 1  # one R, one frame
    else:
        assert sent_again == 6  # go-back-N: the lost frame and the five behind it


@pytest.mark.timeout(10)
def test_selective_repeat_needs_both_ends_an_old_peer_gets_go_back_n():
    h = Harness(lambda: AsyncLine("AA", "BB"), lambda: AsyncLine("BB", "AA", selective_repeat=False),
                channel=Channel())
    assert h.run(10, stop=lambda h: h["a"].up and h["b"].up)
    ups = events_of(h, "a", LineUp) + events_of(h, "b", LineUp)
    assert all("SREJ" not in e.features for _, e in ups)
    imgs = make_images("AA", "BB", 8)
    _lose_data_frames(h, "a", {2})
    h.send("a", imgs)
    h.run_for(20)
    assert [e.image for _, e in events_of(h, "b", MessageReceived)] == imgs
    assert h["a"].machine.counters["retransmissions"] == 7 and h["b"].machine.counters["rejects_tx"] == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ber", [1e-4, 1e-3])
def test_on_a_noisy_line_selective_repeat_sends_less_again_than_go_back_n(ber):
    imgs = make_images("AA", "BB", 300, 128)
    again, took = {}, {}
    for sr in (True, False):
        res = run_pair(*factories(window=8, selective_repeat=sr), imgs, [],
                       channel=Channel(7, ber=ber, baud=115200, latency=0.003), until=2000)
        res.check()  # exactly once, in order
        again[sr], took[sr] = res.a.counters["retransmissions"], res.time
    assert again[True] < again[False] / 2 and took[True] <= took[False]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("lose", [
    ("a", {3, 9}, b"D"),   # frame 3, then its copy sent on the R (the 9th data frame)
    ("b", {1}, b"R"),      # the R asking for frame 3
    ("a", {3, 9, 10}, b"D"),  # frame 3, its copy, and the copy asked for again
])
def test_a_lost_copy_or_r_costs_about_a_round_trip_not_a_reply_timeout(lose):
    """Selective repeat at 115200 baud, reply timeout 3 s: a window of 8 frames of 153 bytes
    (13.3 ms each) is delivered and acknowledged well within a second, once each and in order."""
    h = up_pair(baud=115200, window=8, reply_timeout=3.0)
    side, which, kind = lose
    if kind != b"D":
        _lose_data_frames(h, "a", {3})
    _lose_data_frames(h, side, which, kind)
    imgs, t0 = make_images("AA", "BB", 8), h.now
    h.send("a", imgs)
    assert h.run(t0 + 10)
    assert h.now - t0 < 1.0
    assert [e.image for _, e in events_of(h, "b", MessageReceived)] == imgs
    assert h["a"].machine.counters["timeouts"] == 0


@pytest.mark.timeout(10)
def test_early_asks_back_off_to_the_reply_timeout_and_leave_the_line_up():
    """A receiver that asked with R and never gets the frame asks again after about a round trip,
    then after twice that, and so on while under the reply timeout; then it stops. Nothing of it
    counts toward the retry limit: the line goes down by the sender's retries as before."""
    h = up_pair(baud=115200, window=8, reply_timeout=3.0, retry_limit=2, keepalive=1000.0)
    _lose_data_frames(h, "a", {3} | set(range(9, 100)))  # frame 3 never arrives again
    h.send("a", make_images("AA", "BB", 8))
    h.run_for(2.9)
    b = h["b"].machine
    assert b.counters["reasks"] == 3 and b.counters["rejects_tx"] == 4  # after ~0.2, 0.6, 1.4 s
    assert h["a"].up and h["a"].machine.counters["timeouts"] == 0
    h.run_for(30)
    assert events_of(h, "a", LineDown)[0][1].reason == "retry limit"


@pytest.mark.parametrize("fcs32,fec,special", [(False, False, STUFFED), (True, False, STUFFED),
                                               (True, True, STUFFED), (False, False, XONXOFF_STUFFED)])
def test_the_bytes_a_frame_still_wants_are_never_more_than_it_has_left(fcs32, fec, special):
    """Deframer.wanted() lets the daemon's port wait for bytes instead of reading every few: it
    must never ask for more than the frame arriving has left (else a port would wait on a
    stalled line), and for a D frame it must know, once the image header is in."""
    rng = random.Random(7)
    for _ in range(150):
        plain = bytes(b for b in range(256) if b not in special)  # half the frames with nothing to stuff
        pick = ((lambda: rng.choice((*special, rng.randrange(256)))) if rng.random() < 0.5
                else (lambda: rng.choice(plain)))
        data = bytes(pick() for _ in range(rng.randrange(0, 900)))
        img = encode("BBR", "AAP", rng.randrange(1, 65535), 0, data)
        kind = rng.choice("DDDAN")
        trailer = rng.choice((b"", plain[:16]))
        wire = encode_frame(kind, 3, 1, (img if kind == "D" else b"") + trailer, special, fcs32, fec and kind == "D")
        d = Deframer(1 << 16, collections.Counter())
        d.fcs32, d.fec = fcs32, fec
        d.feed(b"\x7e")  # a flag before: the deframer is no longer hunting
        knew = False
        for i, b in enumerate(wire[1:], start=1):
            wanted = d.wanted()
            assert 1 <= wanted <= len(wire) - i, (kind, i, len(wire), wanted)
            knew |= wanted > 1
            frames = list(d.feed(bytes([b])))
        assert [f.kind for f in frames] == [kind] and frames[0].content is not None
        assert d.wanted() == 1  # between frames: unknown
        assert knew or not (wire[1] == ord("D") and len(data) >= 16)  # an F frame (FEC) is not read early


def test_the_signon_table_names_a_handler_or_an_explicit_ignore_for_every_state_and_frame():
    """The sign-on is data keyed by the enums (async_signon.SIGNON): no pair is left to chance,
    and what async_states draws holds for the frames that only one state takes."""
    from linedrivers.async_signon import IGNORED, SIGNON
    from linedrivers.async_states import SignOnKind, State
    assert set(SIGNON) == set(State) and all(set(row) == set(SignOnKind) for row in SIGNON.values())
    assert all(h is IGNORED or callable(h) for row in SIGNON.values() for h in row.values())
    assert [s for s in State if SIGNON[s][SignOnKind.V] is not IGNORED] == [State.VERIFYING]
    assert SIGNON[State.DOWN][SignOnKind.T] is IGNORED and SIGNON[State.DOWN][SignOnKind.O] is IGNORED
    assert all(SIGNON[s][SignOnKind.S] is not IGNORED for s in State)  # a sign-on is answered in every state
