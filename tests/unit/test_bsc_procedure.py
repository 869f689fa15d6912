"""One conversation per row of the BSC procedure (docs/DESIGN.md 4.2), between two BscLines joined
directly, with exact faults put on chosen sequences; each test reads the trace both sides wrote."""
import pytest

from linedrivers import (BscLine, FrameTraced, LineDown, LineEvent, LineUp, MessageAcked,
                         MessageReceived, PeerRefused)
from linedrivers.bsc_codes import EBCDIC
from linedrivers.image import encode

pytestmark = pytest.mark.timeout(30)

SEQ = {k: EBCDIC.sequence(k) for k in EBCDIC.bodies}


def img(src, n, data=b"hello"):
    return encode("BBQ" if src == "AA" else "AAQ", src + "P", n, 0, data + bytes([n]))


class Duo:
    """Two machines, a virtual clock and a wire that can lose or change chosen writes.
    `faults[side]` is a list of functions bytes -> bytes|None applied to that side's writes,
    each used once when it returns something other than its input."""

    def __init__(self, a=None, b=None, confirm=True):
        self.m = {"a": a or BscLine("AA", "BB"), "b": b or BscLine("BB", "AA", role="secondary")}
        self.now = 0.0
        self.confirm = confirm
        self.faults = {"a": [], "b": []}
        self.ev = {"a": [], "b": []}
        self.mark = {"a": 0, "b": 0}

    def other(self, side):
        return "b" if side == "a" else "a"

    def pump(self):
        for _ in range(100):
            outs = {s: m.data_to_send() for s, m in self.m.items()}  # both write, then both read
            for s, data in outs.items():
                for f in list(self.faults[s]):
                    if not data:
                        break
                    changed = f(data)
                    if changed != data:
                        self.faults[s].remove(f)
                        data = changed or b""
                if data:
                    self.m[self.other(s)].receive_data(data, self.now)
            for s, m in self.m.items():
                evs = m.events()
                self.ev[s] += evs
                if self.confirm and any(isinstance(e, MessageReceived) for e in evs):
                    m.confirm()
            if not any(outs.values()):
                return
        raise AssertionError("no quiet")

    def run(self, seconds):
        """Advance time through every deadline up to now + seconds."""
        end = self.now + seconds
        self.pump()
        while True:
            ds = [d for d in (m.next_deadline() for m in self.m.values()) if d is not None]
            if not ds or min(ds) > end:
                break
            self.now = max(self.now, min(ds))
            for m in self.m.values():
                d = m.next_deadline()
                if d is not None and d <= self.now:
                    m.handle_timeout(self.now)
            self.pump()
        self.now = end

    def signed_on(self):
        self.m["a"].start(self.now)
        self.run(1.0)
        assert self.of("a", LineUp) and self.of("b", LineUp)
        self.take()
        return self

    def take(self):
        """Forget the trace so far."""
        for s in "ab":
            self.mark[s] = len(self.ev[s])

    def of(self, side, kind):
        return [e for e in self.ev[side][self.mark[side]:] if isinstance(e, kind)]

    def tx(self, side):
        return [e.kind for e in self.of(side, FrameTraced) if e.dir == "tx"]


def drop(seq):
    """A fault: lose the first write that contains `seq`."""
    return lambda data: None if seq in data else data


def flip(seq, offset=0):
    """A fault: flip one bit in the first write that contains `seq`."""
    def f(data):
        i = data.find(seq)
        if i < 0:
            return data
        b = bytearray(data)
        b[i + offset] ^= 0x08
        return bytes(b)
    return f


def test_sign_on_and_one_message():
    d = Duo().signed_on()
    d.m["a"].send(img("AA", 1))
    d.run(10)
    assert d.tx("a") == ["ENQ", "ETX", "TTD", "EOT"]
    assert d.tx("b") == ["ACK0", "ACK1", "NAK"]
    assert [e.image for e in d.of("b", MessageReceived)] == [img("AA", 1)]
    assert [e.image for e in d.of("a", MessageAcked)] == [img("AA", 1)]


def test_one_transmission_carries_every_queued_message():
    d = Duo().signed_on()
    for n in range(5):
        d.m["a"].send(img("AA", n))
    d.run(10)
    assert d.tx("a") == ["ENQ"] + ["ETX"] * 5 + ["TTD", "EOT"]
    assert d.tx("b") == ["ACK0", "ACK1", "ACK0", "ACK1", "ACK0", "ACK1", "NAK"]
    assert len(d.of("b", MessageReceived)) == 5


def test_message_handed_over_while_holding_goes_without_a_new_bid():
    d = Duo().signed_on()
    d.m["a"].send(img("AA", 1))
    d.run(1.0)
    d.m["a"].send(img("AA", 2))
    d.run(10)
    assert d.tx("a") == ["ENQ", "ETX", "ETX", "TTD", "EOT"]


def test_lost_block_enq_gets_previous_ack_and_block_goes_again():
    d = Duo().signed_on()
    d.faults["a"].append(drop(b"\x10\x02"))  # the text block
    d.m["a"].send(img("AA", 1))
    d.run(10)
    assert d.tx("a") == ["ENQ", "ETX", "ENQ", "ETX", "TTD", "EOT"]
    assert d.tx("b") == ["ACK0", "ACK0", "ACK1", "NAK"]
    assert [e.retransmit for e in d.of("a", FrameTraced) if e.kind == "ETX"] == [False, True]
    assert len(d.of("b", MessageReceived)) == 1
    assert d.m["a"].counters["timeouts"] >= 1 and d.of("a", LineEvent)


def test_lost_ack_enq_gets_it_repeated_and_nothing_goes_twice():
    d = Duo().signed_on()
    d.faults["b"].append(drop(SEQ["ACK1"]))
    d.m["a"].send(img("AA", 1))
    d.run(10)
    assert d.tx("a") == ["ENQ", "ETX", "ENQ", "ENQ", "TTD", "EOT"]  # believed when heard twice
    assert d.tx("b") == ["ACK0", "ACK1", "ACK1", "ACK1", "NAK"]
    assert len(d.of("b", MessageReceived)) == 1 and len(d.of("a", MessageAcked)) == 1


def test_garbled_ack_is_hunted_past_and_asked_for_again():
    d = Duo().signed_on()
    d.faults["b"].append(flip(SEQ["ACK1"], offset=2))  # DLE becomes another control character
    d.m["a"].send(img("AA", 1))
    d.run(10)
    assert d.tx("a") == ["ENQ", "ETX", "ENQ", "ENQ", "TTD", "EOT"]
    assert d.m["a"].counters["bad_sequences"] == 1


def ascii_duo():
    return Duo(BscLine("AA", "BB", code="ascii"), BscLine("BB", "AA", role="secondary", code="ascii"))


def test_previous_ack_garbled_into_the_expected_one_is_not_believed():
    """ASCII ACK0 and ACK1 differ in one bit: after a lost block, the ACK0 that says 'lost'
    can arrive as ACK1. Asking again shows it, and the block goes again."""
    from linedrivers.bsc_codes import ASCII
    d = ascii_duo().signed_on()
    ack0, ack1 = ASCII.sequence("ACK0"), ASCII.sequence("ACK1")
    d.faults["a"].append(drop(b"\x10\x02"))
    acks = []

    def second_ack0_garbled(x):  # the first ACK0 answers the bid, the second the ENQ
        acks.extend([x] if x == ack0 else [])
        return ack1 if x == ack0 and len(acks) == 2 else x
    d.faults["b"].append(second_ack0_garbled)
    d.m["a"].send(img("AA", 1))
    d.run(10)
    assert len(d.of("b", MessageReceived)) == 1
    assert d.tx("a")[:5] == ["ENQ", "ETX", "ENQ", "ENQ", "ETX"]


def test_enq_garbled_into_eot_does_not_lose_the_block():
    """ASCII ENQ and EOT differ in one bit. The receiver that takes the sender's ENQ for EOT
    leaves receive state and bids; the sender must not take its bid answer for an ACK."""
    from linedrivers.bsc_codes import ASCII
    d = ascii_duo().signed_on()
    blocks = []

    def second_block_lost(x):  # it waits for ACK0, which is also what a bid is answered
        blocks.extend([x] if b"\x10\x02" in x else [])
        return None if len(blocks) == 2 and b"\x10\x02" in x else x
    d.faults["a"].append(second_block_lost)
    enq, eot = ASCII.sequence("ENQ"), ASCII.sequence("EOT")
    d.faults["a"].append(lambda x: eot if x == enq and len(blocks) == 2 else x)  # asks, garbled
    d.m["b"].send(img("BB", 1))  # b has something to send once it thinks the line is free
    d.m["a"].send(img("AA", 1))
    d.m["a"].send(img("AA", 2))
    d.m["a"].handle_timeout(d.now)
    d.run(30)
    assert [e.image for e in d.of("b", MessageReceived)] == [img("AA", 1), img("AA", 2)]
    assert [e.image for e in d.of("a", MessageReceived)] == [img("BB", 1)]


def test_enq_garbled_into_eot_at_an_idle_receiver_does_not_lose_the_block():
    """As above, with a receiver that has nothing to send: it takes the next ENQ for a bid and
    answers ACK0, which is what the lost block waits for. An ACK0 to ENQ sends the block again."""
    from linedrivers.bsc_codes import ASCII
    d = ascii_duo().signed_on()
    blocks = []

    def second_block_lost(x):
        blocks.extend([x] if b"\x10\x02" in x else [])
        return None if len(blocks) == 2 and b"\x10\x02" in x else x
    enq, eot = ASCII.sequence("ENQ"), ASCII.sequence("EOT")
    d.faults["a"].append(second_block_lost)
    d.faults["a"].append(lambda x: eot if x == enq and len(blocks) == 2 else x)
    d.m["a"].send(img("AA", 1))
    d.m["a"].send(img("AA", 2))
    d.run(30)
    assert [e.image for e in d.of("b", MessageReceived)] == [img("AA", 1), img("AA", 2)]
    assert [e.image for e in d.of("a", MessageAcked)] == [img("AA", 1), img("AA", 2)]


def test_bad_bcc_is_naked_and_the_block_sent_again():
    d = Duo().signed_on()
    d.faults["a"].append(flip(b"\x10\x02", offset=10))  # a bit of the text
    d.m["a"].send(img("AA", 1))
    d.run(10)
    assert d.tx("a") == ["ENQ", "ETX", "ETX", "TTD", "EOT"]
    assert d.tx("b") == ["ACK0", "NAK", "ACK1", "NAK"]
    bad = [e for e in d.of("b", FrameTraced) if e.dir == "rx" and not e.ok]
    assert [e.kind for e in bad] == ["ETX"]
    assert d.m["b"].counters["crc_errors"] == 1 and d.m["a"].counters["naks"] == 1
    assert d.m["a"].counters["retransmissions"] == 1


def test_wrong_ack_twice_means_resend_and_the_duplicate_is_acked_not_reported():
    d = Duo().signed_on()
    # the ACK1 for the block reaches AA as ACK0 twice (reply and the answer to ENQ)
    d.faults["b"] += [lambda x: x.replace(SEQ["ACK1"], SEQ["ACK0"])] * 2
    d.m["a"].send(img("AA", 1))
    d.run(10)
    assert d.tx("a") == ["ENQ", "ETX", "ENQ", "ETX", "TTD", "EOT"]
    assert d.tx("b") == ["ACK0", "ACK1", "ACK1", "ACK1", "NAK"]
    assert len(d.of("b", MessageReceived)) == 1
    assert d.m["b"].counters["duplicates"] == 1


def test_wack_holds_the_sender_until_room_then_goes_on():
    d = Duo(confirm=False).signed_on()
    a, b = d.m["a"], d.m["b"]
    b.set_busy(True)
    a.send(img("AA", 1))
    a.send(img("AA", 2))
    d.run(0.5)
    assert d.tx("b") == ["WACK"]  # the bid answered WACK: not now
    b.set_busy(False)
    d.run(1.0)  # bid again after the pause
    assert d.tx("b") == ["WACK", "ACK0"] and d.tx("a") == ["ENQ", "ENQ", "ETX"]
    d.take()
    b.set_busy(True)  # RECV_LIST filled up: the block is stored but nothing more, please
    b.confirm()
    d.run(2.5)
    assert d.tx("b") == ["WACK", "WACK", "WACK"]  # WACK to the block, then to each ENQ
    assert d.tx("a") == ["ENQ", "ENQ"]
    assert len(d.of("a", MessageAcked)) == 1  # WACK is a positive acknowledgement
    b.set_busy(False)
    d.run(1.0)
    assert d.tx("b")[3:] == ["ACK1"] and d.tx("a")[2:] == ["ENQ", "ETX"]
    b.confirm()
    d.run(10)
    assert d.tx("b")[4] == "ACK0"  # the alternation went on where WACK left it
    assert len(d.of("b", MessageReceived)) == 1 and len(d.of("a", MessageAcked)) == 2


def test_a_station_pausing_after_wack_answers_the_busy_peers_bid():
    d = Duo().signed_on()
    d.m["b"].set_busy(True)
    d.m["a"].send(img("AA", 1))
    d.run(0.1)
    assert d.tx("b") == ["WACK"]
    d.m["b"].send(img("BB", 1))  # b is full, but has something of its own to send
    d.run(10)
    assert d.tx("b")[1:3] == ["ENQ", "ETX"] and d.tx("a")[1] == "ACK0"
    assert [e.image for e in d.of("a", MessageReceived)] == [img("BB", 1)]


def test_ttd_when_nothing_is_ready_then_eot_then_either_side_bids():
    d = Duo().signed_on()
    d.m["a"].send(img("AA", 1))
    d.run(1.0)
    assert d.tx("a") == ["ENQ", "ETX"]
    d.run(1.5)
    assert d.tx("a")[2:] == ["TTD", "EOT"] and d.tx("b")[2:] == ["NAK"]
    d.take()
    d.m["b"].send(img("BB", 7))
    d.run(10)
    assert d.tx("b")[:2] == ["ENQ", "ETX"]
    assert [e.image for e in d.of("a", MessageReceived)] == [img("BB", 7)]


def test_rvi_ends_the_transmission_and_gives_the_line_over(monkeypatch):
    from linedrivers import bsc_receiver
    monkeypatch.setattr(bsc_receiver, "RVI_AFTER", 2)
    d = Duo().signed_on()
    for n in range(4):
        d.m["a"].send(img("AA", n))
    d.m["b"].send(img("BB", 9))
    d.m["a"].handle_timeout(d.now)  # a bids first
    d.run(20)
    assert d.tx("b")[:3] == ["ACK0", "ACK1", "RVI"]
    assert d.tx("a")[:4] == ["ENQ", "ETX", "ETX", "EOT"]  # a's other two wait
    assert d.tx("b")[3:5] == ["ENQ", "ETX"]  # b bids and sends
    assert [e.image for e in d.of("b", MessageReceived)] == [img("AA", n) for n in range(4)]
    assert [e.image for e in d.of("a", MessageReceived)] == [img("BB", 9)]


def test_after_rvi_the_line_comes_back_without_a_hold_or_holdoff(monkeypatch):
    """The station that asked for the line by RVI sends what it has and gives the line back
    after bsc_sender.HANDOVER (no TTD, no 2 s hold); the other bids as soon as its EOT comes,
    not after the reply timeout it waits when the peer never takes the line."""
    from linedrivers import bsc_receiver, bsc_sender
    monkeypatch.setattr(bsc_receiver, "RVI_AFTER", 2)
    d = Duo().signed_on()
    for n in range(4):
        d.m["a"].send(img("AA", n))
    d.m["b"].send(img("BB", 9))
    d.m["a"].handle_timeout(d.now)
    d.run(2 * bsc_sender.HANDOVER)
    assert d.tx("b")[:6] == ["ACK0", "ACK1", "RVI", "ENQ", "ETX", "EOT"]
    assert d.tx("a")[:4] == ["ENQ", "ETX", "ETX", "EOT"] and d.tx("a")[4:8] == ["ACK0", "ACK1", "ENQ", "ETX"]
    assert [e.image for e in d.of("b", MessageReceived)] == [img("AA", n) for n in range(4)]
    assert "TTD" not in d.tx("b")


@pytest.mark.parametrize("primary", ["a", "b"])
def test_bid_collision_primary_wins(primary):
    roles = {"a": "primary" if primary == "a" else "secondary"}
    roles["b"] = "secondary" if primary == "a" else "primary"
    d = Duo(BscLine("AA", "BB", role=roles["a"]), BscLine("BB", "AA", role=roles["b"])).signed_on()
    d.m["a"].send(img("AA", 1))
    d.m["b"].send(img("BB", 1))
    for m in d.m.values():
        m.handle_timeout(d.now)  # both bid at the same instant
    d.run(30)
    loser = "b" if primary == "a" else "a"
    assert d.tx(primary)[:2] == ["ENQ", "ETX"]
    assert d.tx(loser)[:2] == ["ENQ", "ACK0"]  # it bid, met the primary's ENQ and yielded
    assert d.m[primary].counters["collisions"] == 1 and d.m[loser].counters["collisions"] == 1
    assert len(d.of("a", MessageReceived)) == 1 and len(d.of("b", MessageReceived)) == 1


def test_collision_when_the_yield_is_lost_resolves_by_the_shorter_timeout():
    d = Duo().signed_on()
    d.faults["a"].append(drop(SEQ["ENQ"]))  # the primary's bid is lost: b never sees a collision
    d.faults["b"].append(drop(SEQ["ENQ"]))  # and b's bid too
    d.m["a"].send(img("AA", 1))
    d.m["b"].send(img("BB", 1))
    for m in d.m.values():
        m.handle_timeout(d.now)
    d.run(30)
    assert len(d.of("a", MessageReceived)) == 1 and len(d.of("b", MessageReceived)) == 1
    first_block = next(s for s, e in ((s, e) for s in "ab" for e in d.of(s, FrameTraced))
                       if e.kind == "ETX" and e.dir == "tx")
    assert first_block == "a"


def test_retry_exhaustion_goes_down_with_unacked_in_order():
    d = Duo(BscLine("AA", "BB", retry_limit=3), None).signed_on()
    d.faults["b"] += [lambda x: None] * 100  # b goes mute
    images = [img("AA", n) for n in range(3)]
    for i in images:
        d.m["a"].send(i)
    d.run(60)
    downs = d.of("a", LineDown)
    assert len(downs) == 1 and downs[0].reason.startswith("retry limit")
    assert downs[0].unacked == images
    assert d.tx("a")[-1] == "DISC" and d.tx("a").count("ENQ") == 4
    assert [e.kind for e in d.of("a", LineEvent)].count("retry") == 3
    assert d.m["a"].room() == 0


def test_retry_exhaustion_mid_transmission_hands_back_block_in_flight_and_queue():
    d = Duo(BscLine("AA", "BB", retry_limit=3), None).signed_on()
    d.m["a"].send(img("AA", 1))
    d.run(0.5)  # acknowledged; a holds the line for more
    d.take()
    d.faults["b"] += [lambda x: None] * 100  # b goes mute
    d.m["a"].send(img("AA", 2))
    d.m["a"].send(img("AA", 3))
    d.run(60)
    assert d.tx("a") == ["ETX", "ENQ", "ENQ", "ENQ", "DISC"]
    downs = d.of("a", LineDown)
    assert [x.reason for x in downs] == ["retry limit: ENQ for the reply"]
    assert downs[0].unacked == [img("AA", 2), img("AA", 3)]


def test_receiver_stays_in_receive_state_until_eot_or_disconnect_timeout():
    d = Duo().signed_on()
    d.faults["a"].append(drop(SEQ["EOT"]))
    d.m["a"].send(img("AA", 1))
    d.run(3)
    assert d.m["b"].state == "RECV"  # EOT lost: an ENQ now is a 'repeat your reply'
    d.run(20)
    assert d.m["b"].state == "CONTROL"
    assert any(e.kind == "timeout" for e in d.of("b", LineEvent))


def test_bid_meeting_a_peer_still_in_receive_state_resends_eot():
    d = Duo().signed_on()
    d.faults["a"].append(drop(SEQ["EOT"]))
    d.m["a"].send(img("AA", 1))
    d.run(3)
    d.m["a"].send(img("AA", 2))
    d.run(10)
    assert d.tx("b")[:4] == ["ACK0", "ACK1", "NAK", "ACK1"]  # b repeats ACK1 to the bid ENQ
    assert d.tx("a")[4:8] == ["ENQ", "EOT", "ENQ", "ETX"]
    assert len(d.of("b", MessageReceived)) == 2


def test_multi_block_acks_etb_at_once_and_etx_after_confirm():
    a = BscLine("AA", "BB", block_size=60)
    b = BscLine("BB", "AA", role="secondary", block_size=60)
    d = Duo(a, b, confirm=False).signed_on()
    image = img("AA", 1, bytes(range(110)))
    a.send(image)
    d.run(1.0)  # 129 bytes: blocks of 60, 60 and 9
    assert d.tx("a") == ["ENQ", "ETB", "ETB", "ETX"]
    assert d.tx("b") == ["ACK0", "ACK1", "ACK0"]  # the last block waits for confirm()
    assert [e.image for e in d.of("b", MessageReceived)] == [image]
    assert not d.of("a", MessageAcked)
    b.confirm()
    d.run(10)
    assert d.tx("b")[3] == "ACK1" and d.of("a", MessageAcked)[0].image == image


def test_sign_off_and_identify_again():
    d = Duo().signed_on()
    d.m["a"].stop(d.now)
    d.run(1)
    assert [e.reason for e in d.of("b", LineDown)] == ["peer signed off"]
    assert d.m["a"].room() == 0 and d.m["b"].room() == 0
    d.m["b"].start(d.now)
    d.run(1)
    assert d.tx("b")[-2:] == ["ID", "EOT"] and d.of("a", LineUp)


def test_sign_on_refused_and_collision_of_sign_ons():
    d = Duo(BscLine("AA", "ZZ"), BscLine("ZZ", "AA", role="secondary")).signed_on()  # sanity
    d = Duo(BscLine("AA", "BB"), BscLine("ZZ", "AA", role="secondary"))
    d.m["b"].start(0.0)
    d.run(20)
    assert d.of("a", PeerRefused)[0].peer == "ZZ"
    assert d.of("b", LineDown)[0].reason == "refused"
    d = Duo()
    d.m["a"].start(0.0)
    d.m["b"].start(0.0)
    d.run(5)
    assert d.m["a"].counters["collisions"] == 1
    assert len(d.of("a", LineUp)) == 1 and len(d.of("b", LineUp)) == 1


def test_peer_restart_drops_the_line_and_signs_on_anew():
    d = Duo().signed_on()
    d.m["a"].send(img("AA", 1))
    d.run(0.001)
    d.m["b"] = BscLine("BB", "AA", role="secondary")  # b's daemon restarted mid-transmission
    d.m["b"].start(d.now)
    d.run(30)
    downs = d.of("a", LineDown)
    assert downs and downs[0].reason == "peer restarted"
    assert d.m["a"].state in ("CONTROL", "RECV") and d.m["b"].state in ("CONTROL", "RECV")


def test_every_phase_has_a_handler_or_an_explicit_ignore_for_every_answer_and_its_timer():
    """The BSC tables are data keyed by the enums: no (phase, answer) pair is left to chance."""
    from linedrivers.bsc_sender import IGNORED, ON_BID_REPLY, ON_REPLY, ON_TIMER
    from linedrivers.bsc_states import BidAnswer, Phase, Reply
    xmit = {Phase.AUTH, Phase.REPLY, Phase.ENQ, Phase.WACK, Phase.WACKENQ, Phase.HOLD, Phase.TTD}
    assert set(ON_REPLY) == xmit and set(ON_BID_REPLY) == {Phase.BID, Phase.PAUSE} and set(ON_TIMER) == set(Phase)
    assert all(set(row) == set(Reply) for row in ON_REPLY.values())
    assert all(set(row) == set(BidAnswer) for row in ON_BID_REPLY.values())
    handlers = [h for table in (ON_REPLY, ON_BID_REPLY) for row in table.values() for h in row.values()]
    assert all(h is IGNORED or callable(h) for h in handlers) and all(callable(h) for h in ON_TIMER.values())
    assert ON_REPLY[Phase.HOLD] == dict.fromkeys(Reply, IGNORED)  # no block in flight: nothing answers


def test_an_image_of_higher_priority_goes_before_those_not_begun_never_before_the_one_in_flight():
    """What mccs.core.lines hands beyond room() on a BSC line (an urgent message: _overtakes)."""
    d = Duo().signed_on()
    a = d.m["a"]
    a.send(img("AA", 1))
    a.send(img("AA", 2), priority=7)
    assert list(a._queue) == [img("AA", 2), img("AA", 1)]  # neither begun
    d.run(5)
    assert [e.image for e in d.of("b", MessageReceived)] == [img("AA", 2), img("AA", 1)]
    d.faults["b"].append(lambda data: b"" if data == SEQ["ACK1"] else data)  # the answer to the next block is lost
    a.send(img("AA", 3))
    a.handle_timeout(d.now)
    d.pump()
    assert a._frames is not None and list(a._queue) == [img("AA", 3)]  # its block is out, unanswered
    a.send(img("AA", 4), priority=7)
    assert list(a._queue) == [img("AA", 3), img("AA", 4)]
    d.run(10)
    assert [e.image for e in d.of("b", MessageReceived)][2:] == [img("AA", 3), img("AA", 4)]


def test_after_rvi_an_image_of_higher_priority_than_the_message_just_sent_goes_before_the_eot(monkeypatch):
    from linedrivers import bsc_receiver
    monkeypatch.setattr(bsc_receiver, "RVI_AFTER", 1)
    d = Duo().signed_on()
    a = d.m["a"]
    d.m["b"].send(img("BB", 9))  # b has a message: it answers a's first block RVI
    d.faults["b"].append(lambda data: b"" if data == SEQ["RVI"] else data)  # lost once: a asks (ENQ) again
    a.send(img("AA", 1))
    a.handle_timeout(d.now)
    d.pump()
    a.send(img("AA", 2))
    a.send(img("AA", 3), priority=7)  # handed while block 1 waits for its answer
    d.run(20)
    assert d.tx("a")[:6] == ["ENQ", "ETX", "ENQ", "ENQ", "ETX", "EOT"]  # 1, then 3 (urgent), then the line to b
    assert [e.image for e in d.of("b", MessageReceived)][:2] == [img("AA", 1), img("AA", 3)]
    assert [e.image for e in d.of("a", MessageReceived)] == [img("BB", 9)]
