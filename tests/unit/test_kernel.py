"""The daemon's core in memory: every rule of docs/DESIGN.md section 2 and the durability rules of
sections 4.3 and 5, on `mccs.core.kernel.Kernel` through `mccs.testbed.hostsim` (real checkpoint files, real
line machines over in-memory lines, a virtual clock; no daemon process, socket or port)."""
from __future__ import annotations

import base64

import pytest

from checkpoint.changes import Table
from mccs.core import msgids
from mccs.config import ProcessConfig
from mccs.core.lists import BlockState, Mailbox
from mccs.core.lines import GUESS_WAIT, READ_EARLY, LineState
from mccs.core.msgids import DUP_WINDOW, KeyWindow, MsgIds
from mccs.core.replies import Accepted
from mccs.core.sessions import Creds
from mccs.testbed.hostsim import WALL0, SimNet, line

pytestmark = pytest.mark.timeout(60)


def _data(reply: dict) -> bytes:
    import base64
    return base64.b64decode(reply["msg"]["data"])


def _inserted(fx, table: Table) -> list[tuple]:
    return [c.params for c in fx.changes if c.sql.startswith(f"INSERT INTO {table} ")]


# -- the primitives ---------------------------------------------------------------------------
def test_send_recv_selection_order_and_user_id(alone):
    a, b, r = alone.client("AA", "A"), alone.client("AA", "B"), alone.client("AA", "R")
    first = a.send("AAR", b"a1", user_id=5)["msg_id"]
    b.send("AAR", b"b1", user_id=6)
    a.send("AAR", b"a2", user_id=6)
    last = a.send("AAR", b"a3")["msg_id"]
    assert _data(r.recv(**{"from": "AAB"})) == b"b1"
    assert _data(r.recv(user_id=6)) == b"a2"
    assert r.recv(**{"from": "AAB"}, wait=False)["msg"] is None
    got = r.recv()["msg"]
    assert (got["from_id"], got["msg_id"], got["user_id"]) == ("AAA   ", first, 5)
    assert r.recv()["msg"]["user_id"] == last  # USER_ID 0 means the MSG_ID


def test_recv_timeout_answers_nothing_at_its_deadline(alone):
    r = alone.client("AA", "R")
    rid = r.request({"op": "recv", "timeout": 2.0})
    assert alone.run(lambda: r.reply(rid), duration=1.9) is None
    assert alone.run(lambda: r.reply(rid), duration=0.5)["msg"] is None
    assert alone.now == pytest.approx(2.0, abs=0.15)


def test_a_waiting_recv_is_answered_when_its_message_arrives(alone):
    r, s = alone.client("AA", "R"), alone.client("AA", "S")
    rid = r.request({"op": "recv"})
    alone.run(duration=1.0)
    assert r.reply(rid) is None
    s.send("AAR", b"late")
    assert _data(alone.run(lambda: r.reply(rid))) == b"late"


def test_unknown_host_refused_and_recv_from_unlinked_host_blank(alone):
    p = alone.client("AA", "P")
    assert p.send("ZZX", b"x")["code"] == "unknown_host"
    assert p.recv(**{"from": "ZZX"})["msg"] is None  # answered at once although it would wait


def test_nothing_is_sent_to_the_daemons_own_name(alone):
    """AAMCCS takes no messages: one sent there waited on RECV_LIST for ever (an adversarial test)."""
    p = alone.client("AA", "P")
    assert p.send("AAMCCS", b"x")["code"] == "not_permitted"
    assert not alone["AA"].kernel.lists.recv


def test_requests_need_a_name_but_administration_does_not(alone):
    anon = alone.client("AA", None)
    assert anon.send("AAR", b"x")["code"] == "no_name"
    assert anon.ask({"op": "ping"}) == {"id": 2, "ok": True, "host": "AA"}
    alone.client("AA", "STAT")  # a process named STAT does not get in the way of administration
    assert alone.client("AA", None).ask({"op": "ping"})["ok"]


def test_one_name_per_connection_and_several_connections_per_name(alone):
    p = alone.client("AA", "P")
    assert alone.client("AA", None).ask({"op": "hello", "name": "P"})["ok"]  # a second handler of P
    assert p.ask({"op": "hello", "name": "Q"})["code"] == "bad_request"
    assert p.ask({"op": "hello", "name": "P", "observe": True})["code"] == "bad_request"
    assert p.ask({"op": "hello", "name": "P"})["ok"]  # the same again is no change


# -- durability -----------------------------------------------------------------------------------
def test_a_send_is_answered_in_the_pass_that_stores_it(alone):
    host = alone["AA"]
    p = host.client("P")
    msg_id = p.send("AAR", b"x")["msg_id"]
    fx = next(fx for fx in host.passes if any(r.body == Accepted(msg_id, "AAR   ") for r in fx.replies))
    assert any(row[3] == msg_id for row in _inserted(fx, Table.RECV_LIST))


def test_a_failed_commit_sends_no_reply_and_a_retry_stores_once(alone):
    host = alone["AA"]
    p = host.client("P")
    host.fail_next_commit = True
    rid = p.request({"op": "send", "to": "AAR", "data": "eA==", "req": "r1"})
    alone.step()
    assert p.reply(rid) is None
    host.crash()  # memory rebuilt from the checkpoint: the SEND was never stored
    assert host.kernel.status()["lists"]["recv"] == 0
    p = host.client("P")
    first = p.send("AAR", b"x", req="r1")["msg_id"]
    assert p.send("AAR", b"x", req="r1")["msg_id"] == first  # asked again: the same MSG_ID
    assert host.kernel.status()["lists"]["recv"] == 1


def test_the_simulator_runs_the_daemons_driver_traces_and_a_batch_retried_after_a_crash(alone):
    """tools/hostsim performs a pass through mccs.daemon.driver, as the daemon does: the trace events
    are kept in order, and a send_many asked again after a crash finds what it got (stored once)."""
    host = alone["AA"]
    p = host.client("P")
    batch = {"op": "send_many", "req": "b1", "msgs": [{"to": "AAR", "data": "eA=="}, {"to": "AAR", "data": "eQ=="}]}
    first = p.ask(batch)["msg_ids"]
    kinds = [ev.kind for ev in host.traces if ev.type == "msg"]
    assert kinds == ["accepted", "received", "accepted", "received"] and len(first) == 2
    host.crash()
    assert host.client("P").ask(batch)["msg_ids"] == first  # the retry lookup of the daemon
    assert host.kernel.status()["lists"]["recv"] == 2


def test_durable_before_ack_a_receiver_crash_before_its_commit_loses_nothing(pair):
    aa, bb = pair["AA"], pair["BB"]
    pair.run(lambda: bb.kernel.lines["AA"].state is LineState.UP)
    bb.crash_when = lambda fx: _inserted(fx, Table.RECV_LIST)  # kill -9 before the pass that stores commits
    p = aa.client("P")
    sent = [p.send("BBR", bytes([i]))["msg_id"] for i in range(5)]
    assert pair.run(lambda: bb.crash_when is None)
    r = bb.client("R")
    assert [r.recv()["msg"]["msg_id"] for _ in range(5)] == sent
    assert r.recv(wait=False)["msg"] is None
    assert pair.run(lambda: aa.kernel.status()["lists"]["send"] == 0)


def test_ack_bytes_leave_only_with_the_commit_of_the_message(pair):
    aa, bb = pair["AA"], pair["BB"]
    pair.run(lambda: aa.kernel.lines["BB"].state is LineState.UP)
    aa.client("P").send("BBR", b"x")
    fx = pair.run(lambda: next((fx for fx in bb.passes if _inserted(fx, Table.RECV_LIST)), None))
    # the acknowledgement is among the bytes of that very pass, which follow its changes
    assert fx.writes and fx.changes
    before = [f for f in bb.passes[:bb.passes.index(fx)] if f.writes]
    assert all(not _inserted(f, Table.RECV_LIST) for f in before)


def test_bytes_that_complete_no_frame_need_no_pass(pair, monkeypatch):
    """A port delivers a frame in many small reads: only the read that completes a frame (or
    block) asks for a pass, and the pass then handles that frame."""
    aa, bb = pair["AA"], pair["BB"]
    pair.run(lambda: bb.kernel.lines["AA"].state is LineState.UP)
    caught = []
    monkeypatch.setattr(pair, "write", lambda src, dst, data: caught.append((src, data)))
    aa.client("P").send("BBR", b"x" * 100)
    frame = [data for src, data in caught if src == "AA"][-1]  # the D frame
    assert len(frame) > 100
    bb.run_pass()  # nothing left over from before
    wants = [bb.kernel.line_data("AA", frame[i:i + 10], pair.now) for i in range(0, len(frame), 10)]
    assert wants == [None] * (len(wants) - 1) + [0.0]  # a message: a pass at once
    bb.run_pass()
    monkeypatch.undo()
    assert _data(bb.client("R").recv()) == b"x" * 100


def test_a_frame_only_to_trace_may_wait_and_keeps_the_time_it_came(pair, monkeypatch):
    """A damaged frame (or a block of a segment, an acknowledgement) only makes a trace line: its
    pass may wait up to TRACE_DELAY, and the line is stamped with the frame's arrival."""
    from mccs.core.lines import TRACE_DELAY
    aa, bb = pair["AA"], pair["BB"]
    pair.run(lambda: bb.kernel.lines["AA"].state is LineState.UP)
    caught = []
    monkeypatch.setattr(pair, "write", lambda src, dst, data: caught.append((src, data)))
    aa.client("P").send("BBR", b"y" * 100)
    frame = bytearray([data for src, data in caught if src == "AA"][-1])
    frame[len(frame) // 2] ^= 0x10  # the FCS fails
    bb.run_pass()
    came = pair.now
    assert bb.kernel.line_data("AA", bytes(frame), came) == TRACE_DELAY
    pair.now += TRACE_DELAY
    traced = [t for t in bb.run_pass().traces if t.type == "frame" and t.fields["ok"] is False]
    assert len(traced) == 1 and traced[0].at == WALL0 + came  # (the simulated wall clock starts at WALL0)


def test_a_run_of_damaged_frames_is_one_trace_line(pair):
    """Noise makes a damaged frame of every few bytes (an adversarial test: 64 bytes of trace for
    every byte of noise on a line): those that come in a row before their pass are traced as one
    line, their number in `frames` and their bytes summed; a good frame after them is its own."""
    from mccs.core.lines import TRACE_DELAY
    aa, bb = pair["AA"], pair["BB"]
    pair.run(lambda: bb.kernel.lines["AA"].state is LineState.UP)
    bb.run_pass()
    noise = b"A\x7e" * 300
    for i in range(0, len(noise), 7):  # as a port hands it over: a few bytes a read
        bb.kernel.line_data("AA", noise[i:i + 7], pair.now)
    pair.now += TRACE_DELAY
    damaged = [t for t in bb.run_pass().traces if t.type == "frame" and t.fields["ok"] is False]
    assert [(t.kind, t.fields["dir"], t.fields["frames"]) for t in damaged] == [("?", "rx", 300)]
    assert damaged[0].fields["bytes"] >= len(noise)
    aa.client("P").send("BBR", b"after the noise")
    pair.run(lambda: bb.kernel.lists.recv)
    assert _data(bb.client("R").recv()) == b"after the noise"


def _streamed(tmp_path, monkeypatch, n: int, **keys):
    """Hosts AA and BB on a 115,200-baud line, up and settled, the `n` data frames AA then sends
    BB, caught on the way (not delivered), and one frame's time on the wire; BB has had its pass,
    so nothing waits there."""
    net = SimNet(tmp_path, {"AA": [line("BB", baud=115200, **keys)], "BB": [line("AA", baud=115200, **keys)]})
    net.run(lambda: net["BB"].kernel.lines.lcbs["AA"].state is LineState.UP)
    net.run(duration=1.0)  # the routes exchanged
    caught = []
    monkeypatch.setattr(net, "write", lambda src, dst, data: caught.append(data) if src == "AA" else None)
    p = net["AA"].client("P")
    for i in range(n):
        p.send("BBR", bytes([i]) * 100)
    def frames():
        return list({f[1]: b"\x7e" + f + b"\x7e" for f in b"".join(caught).strip(b"\x7e").split(b"\x7e\x7e")
                     if f[:1] == b"D"}.values())  # by SEQ: a frame handed again is the same frame
    while len(frames()) < n:  # AA's Message-Sender hands the line a few frames a pass
        net.now += 0.01
        net["AA"].run_pass()
    net["BB"].run_pass()
    return net, frames(), len(frames()[0]) * 10 / 115200


def _stored(fx) -> int:
    return len(_inserted(fx, Table.RECV_LIST))


def _acks(fx) -> int:
    return sum(w.data.count(b"\x7eA") for w in fx.writes)


def test_a_streaming_peer_s_messages_share_one_pass_commit_and_acknowledgement(tmp_path, monkeypatch):
    """Frames back to back while the peer may send more: the messages wait for the frames behind
    them, up to the line's ack_hold after the first, and one pass stores them all and
    acknowledges them once (issue 15). A pass that comes meanwhile leaves them waiting."""
    net, frames, gap = _streamed(tmp_path, monkeypatch, 5)  # frames back to back: one a frame's time
    bb, start = net["BB"], net.now
    at = [start + i * gap for i in range(5)]
    assert bb.kernel.line_data("AA", frames[0], at[0]) == 0.0  # the first: nothing came before it
    net.now = at[0]
    assert _stored(bb.run_pass()) == 1
    waits = [bb.kernel.line_data("AA", f, t) for f, t in zip(frames[1:4], at[1:4])]
    assert waits[0] == pytest.approx(0.05) and all(w > 0 for w in waits)  # wait for the next
    assert at[1] + waits[0] == pytest.approx(at[3] + waits[2])  # until one time, counted from the first
    # the frames behind gather until just before the wait ends, and are read then, for its pass
    wanted = bb.kernel.line_wanted("AA", at[3])
    assert at[3] + wanted * 10 / 115200 == pytest.approx(at[1] + 0.05 - READ_EARLY, abs=10 / 115200)
    net.now = at[3]
    between = bb.run_pass()  # a pass that comes anyway (a process's request, say)
    assert _stored(between) == 0 and _acks(between) == 0
    assert between.deadline == pytest.approx(at[1] + 0.05)
    # the fifth could not come before that: the wait ends with it
    assert bb.kernel.line_data("AA", frames[4], at[4]) == 0.0
    net.now = at[4]
    fx = bb.run_pass()
    assert _stored(fx) == 4 and _acks(fx) == 1
    assert bb.kernel.line_wanted("AA", at[4]) == 1  # nothing waits: the next byte is read as it comes
    r = bb.client("R")
    assert [_data(r.recv())[0] for _ in range(5)] == [0, 1, 2, 3, 4]


def test_the_next_frame_of_a_stream_gathers_with_the_frames_behind_it(tmp_path, monkeypatch):
    """A wait that ends while the peer's next frame is on its way: that frame will wait too, so
    the port lets it and the frames behind it gather for ack_hold, and one read takes them."""
    net, frames, gap = _streamed(tmp_path, monkeypatch, 4)
    bb = net["BB"]
    bb.kernel.line_data("AA", frames[0], net.now)
    bb.run_pass()
    first = net.now + gap
    assert bb.kernel.line_data("AA", frames[1], first) == pytest.approx(0.05)
    end = first + 0.049  # the third ends the wait (no frame could come after it in time): a pass now
    assert bb.kernel.line_data("AA", frames[2] + frames[3][:40], end) == 0.0
    rest = len(frames[3]) - 40 - frames[3][40:].count(b"\x7d")  # (the length a header tells counts no escapes:
    # a random epoch or CRC byte 0x7d or 0x7e, escaped, makes the frame one longer than told)
    assert bb.kernel.line_wanted("AA", end) == pytest.approx(rest + (0.05 - READ_EARLY) * 11520, abs=2)
    assert bb.kernel.line_wanted("AA", end + 5 * gap) == rest  # the stream is over: the frame, and no more
    bb.kernel.lines.lcbs["AA"].cfg.ack_hold = gap  # frames too long to be held (a slow line): not held
    assert bb.kernel.line_wanted("AA", end) == rest
    bb.kernel.lines.lcbs["AA"].cfg.baud = 1200  # a length a header told is waited for GUESS_WAIT at most
    assert bb.kernel.line_wanted("AA", end) == int(GUESS_WAIT * 120)


def test_a_gather_lets_no_more_frames_come_than_the_window_has_room_for(tmp_path, monkeypatch):
    """The wait must end when the peer's window is nearly full (_ack_wait): the port reads by then."""
    net, frames, gap = _streamed(tmp_path, monkeypatch, 3, window=3)
    bb = net["BB"]
    bb.kernel.line_data("AA", frames[0], net.now)
    bb.run_pass()
    assert bb.kernel.line_data("AA", frames[1], net.now + gap) > 0  # held: room for two more
    assert len(frames[2]) <= bb.kernel.line_wanted("AA", net.now + gap) <= len(frames[2]) + 8  # one: FRAME_BYTES


def test_frames_behind_held_messages_are_read_one_at_a_time_while_frames_of_ours_wait_for_acks(
        tmp_path, monkeypatch):
    """The acknowledgements of our own frames ride on the peer's: while some wait, a frame is read
    as it comes (taken to be as long as the last), not left to gather until the hold ends."""
    net, frames, gap = _streamed(tmp_path, monkeypatch, 3)
    bb = net["BB"]
    bb.client("Q").send("AAS", b"ours")
    bb.run_pass()
    assert bb.kernel.lines.lcbs["AA"].active  # handed, not acknowledged (AA's frames are caught)
    bb.kernel.line_data("AA", frames[0], net.now)
    bb.run_pass()
    assert bb.kernel.line_data("AA", frames[1], net.now + gap) > 0  # held for the next
    assert len(frames[1]) <= bb.kernel.line_wanted("AA", net.now + gap) <= len(frames[1]) + 8  # about: FRAME_BYTES


def test_messages_waiting_for_a_stream_that_stops_are_stored_at_the_end_of_the_wait(tmp_path, monkeypatch):
    net, frames, gap = _streamed(tmp_path, monkeypatch, 2)
    bb = net["BB"]
    bb.kernel.line_data("AA", frames[0], net.now)
    assert _stored(bb.run_pass()) == 1
    came = net.now + gap
    assert bb.kernel.line_data("AA", frames[1], came) == pytest.approx(0.05)
    net.now = came + 0.049
    assert _stored(bb.run_pass()) == 0
    net.now = came + 0.05
    fx = bb.run_pass()
    assert _stored(fx) == 1 and _acks(fx) == 1


def test_messages_waiting_for_the_stream_are_not_acknowledged_and_a_crash_loses_none(tmp_path, monkeypatch):
    """Durable before ACK holds while they wait: nothing acknowledges them, so after a kill -9
    the sender sends them again, and each is delivered once."""
    net, frames, gap = _streamed(tmp_path, monkeypatch, 3)
    bb = net["BB"]
    bb.kernel.line_data("AA", frames[0], net.now)
    assert _stored(bb.run_pass()) == 1
    for i, f in enumerate(frames[1:], 1):
        assert bb.kernel.line_data("AA", f, net.now + i * gap) > 0
    net.now += 2 * gap
    assert _acks(bb.run_pass()) == 0
    bb.crash()
    monkeypatch.undo()
    r = bb.client("R")
    assert [_data(r.recv())[0] for _ in range(3)] == [0, 1, 2]
    net.run(duration=2.0)
    assert r.recv(wait=False)["msg"] is None and not net["AA"].kernel.lists.send


@pytest.mark.parametrize("keys, gap_frames", [({"ack_hold": 0.0}, 1), ({}, 3)])
def test_no_wait_when_switched_off_or_for_a_message_that_comes_alone(tmp_path, monkeypatch, keys, gap_frames):
    """ack_hold = 0 stores every message at once, as before; so does a message that did not come
    right behind the last (light load: no latency is added)."""
    net, frames, frame_time = _streamed(tmp_path, monkeypatch, 3, **keys)
    bb, gap = net["BB"], gap_frames * frame_time
    for i, f in enumerate(frames):
        assert bb.kernel.line_data("AA", f, net.now) == 0.0
        assert _stored(bb.run_pass()) == 1
        net.now += gap



def test_a_bsc_sender_writes_the_next_block_in_the_pass_that_takes_the_ack(tmp_path):
    """BSC holds the line for more after an ACK; the Message-Sender hands the next image in the
    pass the ACK makes, and the machine sends it in that pass too (written after its commit),
    not in a pass of its own a loop turn later."""
    net = SimNet(tmp_path, {"AA": [line("BB", protocol="bsc")], "BB": [line("AA", protocol="bsc", role="secondary")]})
    assert net.run(lambda: net["AA"].kernel.lines["BB"].state.name == "UP", duration=30)
    p = net.client("AA", "P")
    for i in range(5):
        p.request({"op": "send", "to": "BBR", "data": "eA==", "user_id": i + 1})
    start = len(net["AA"].passes)
    assert net.run(lambda: len(net["BB"].kernel.lists.recv) == 5, duration=30)
    passes = net["AA"].passes[start:]
    acked = [fx for fx in passes if any(t.type == "msg" and t.kind == "acked" for t in fx.traces)]
    blocks = [t for fx in passes for t in fx.traces if t.type == "frame" and t.kind == "ETX"]
    assert len(acked) >= 4 and len(blocks) >= 5  # and a routing update, maybe
    for fx in acked[:4]:  # each ACK's pass writes the next block
        assert any(t.type == "frame" and t.kind == "ETX" for t in fx.traces) and fx.writes


def test_an_event_a_machine_makes_at_the_end_of_a_pass_gets_the_next_pass_at_once(tmp_path, monkeypatch):
    """What the machine does on its deadline at the end of a pass (above) may be more than a frame
    (a timer's retry, a line given up): that event waits for the next pass, which is due at once."""
    from linedrivers import LineEvent
    net = SimNet(tmp_path, {"AA": [line("BB", protocol="bsc")], "BB": [line("AA", protocol="bsc", role="secondary")]})
    assert net.run(lambda: net["AA"].kernel.lines["BB"].state.name == "UP", duration=30)
    lines, machine = net["AA"].kernel.lines, net["AA"].kernel.lines["BB"].machine
    sending, acted = [], []

    def send(fx, busy, wall, real=lines.send):
        sending.append(fx)
        real(fx, busy, wall)
        sending.pop()

    def handle_timeout(now, real=machine.handle_timeout):
        real(now)
        if sending:  # at the end of a pass, in Lines.send
            machine._events.append(LineEvent("timeout", "a test's"))
            acted.append((sending[-1], now))
    monkeypatch.setattr(lines, "send", send)
    monkeypatch.setattr(machine, "handle_timeout", handle_timeout)
    p = net.client("AA", "P")
    for i in range(3):
        p.request({"op": "send", "to": "BBR", "data": "eA==", "user_id": i + 1})
    assert net.run(lambda: len(net["BB"].kernel.lists.recv) == 3, duration=30)
    assert acted and all(fx.deadline is not None and fx.deadline <= now for fx, now in acted)


def test_back_pressure_waits_for_a_buffer_and_keeps_the_wait_durable(tmp_path):
    net = SimNet(tmp_path, {"AA": []}, buffers=2)
    host = net["AA"]
    s, r = host.client("S"), host.client("R")
    s.send("AAR", b"1")
    s.send("AAR", b"2")
    rid = s.request({"op": "send", "to": "AAR", "data": "Mw==", "req": "third"})
    net.run(duration=0.5)
    assert s.reply(rid) is None
    assert host.kernel.status()["lists"] == {"wait": 1, "send": 0, "recv": 2}
    host.crash()  # the waiting SEND was kept in the checkpoint
    r = host.client("R")
    assert host.kernel.status()["lists"]["wait"] == 1
    assert [_data(r.recv()) for _ in range(3)] == [b"1", b"2", b"3"]


def test_restore_brings_back_every_list_and_the_ids_in_use(alone):
    host = alone["AA"]
    p = host.client("P")
    remote = [p.send("BBQ", bytes([i]))["msg_id"] for i in range(3)]
    local = p.send("AAR", b"here")["msg_id"]
    host.crash()
    k = host.kernel
    assert k.status()["lists"] == {"wait": 0, "send": 3, "recv": 1}
    assert set(k.ids.in_use) == {*remote, local}
    assert [b.msg_id for b in k.lists.send] == remote


# -- MSG_IDs ---------------------------------------------------------------------------------------
def test_no_msg_id_in_use_is_given_again_after_the_wrap(alone):
    host = alone["AA"]
    p = host.client("P")
    queued = [p.send("BBQ", b"q")["msg_id"] for _ in range(5)]
    host.kernel.ids.next_id = 65534  # as if 65,533 other messages had been sent meanwhile
    later = [p.send("BBQ", b"q")["msg_id"] for _ in range(4)]
    assert queued == [1, 2, 3, 4, 5] and later == [65534, 65535, 6, 7]


def test_sends_wait_while_every_free_msg_id_is_in_use(alone, monkeypatch):
    monkeypatch.setattr(msgids, "MAX_IN_USE", 3)
    host = alone["AA"]
    p, r = host.client("P"), host.client("R")
    for _ in range(3):
        p.send("AAR", b"x")
    rid = p.request({"op": "send", "to": "AAR", "data": "eA=="})
    alone.run(duration=0.5)
    assert p.reply(rid) is None  # waits: back-pressure, not a reused id
    r.recv()
    assert alone.run(lambda: p.reply(rid))["ok"]


def test_the_sent_window_keeps_ids_a_destination_may_still_hold():
    ids = MsgIds("AA", 1)
    to_bb = [ids.allocate("BB", seq)[0] for seq in range(3)]
    for m in to_bb:
        ids.release(m)  # acknowledged: no longer in use, but BB's window holds them
    ids.next_id = 1  # the counter came round
    assert ids.allocate("BB", 10)[0] == 4  # not 1, 2 or 3: BB would drop them as duplicates
    assert ids.allocate("CC", 11)[0] == 5
    ids.next_id = 1
    assert ids.allocate("CC", 12)[0] == 1  # CC never got 1: free for it


def test_duplicate_window_keeps_the_last_keys_per_origin():
    w = KeyWindow(Table.DUP_WINDOW)
    changes = []
    for i in range(1, DUP_WINDOW + 2):
        changes += w.add("AA", i, i)
    assert ("AA", 1) not in w and ("AA", 2) in w and ("AA", DUP_WINDOW + 1) in w
    assert ("BB", 2) not in w
    assert sum(c.sql.startswith("DELETE") for c in changes) == 1
    restored = KeyWindow(Table.DUP_WINDOW, [("AA", 2), ("AA", 3)])
    assert ("AA", 3) in restored


def test_an_ack_removes_exactly_the_message_it_acknowledges(pair):
    aa, bb = pair["AA"], pair["BB"]
    p, r = aa.client("P"), bb.client("R")
    p.send("BBR", b"one")
    aa.kernel.ids.next_id = 1  # the next free id is 2: 1 is in use until acknowledged
    second = p.send("BBR", b"two")["msg_id"]
    assert second == 2
    assert [_data(r.recv()) for _ in range(2)] == [b"one", b"two"]
    assert pair.run(lambda: aa.kernel.status()["lists"]["send"] == 0)
    assert not aa.kernel.ids.in_use


# -- lines ------------------------------------------------------------------------------------------
def test_a_line_going_down_gives_its_messages_back_in_order(pair):
    aa, bb = pair["AA"], pair["BB"]
    pair.run(lambda: aa.kernel.lines["BB"].state is LineState.UP)
    pair.channel("AA", "BB").disconnect()
    p = aa.client("P")
    sent = [p.send("BBR", bytes([i]))["msg_id"] for i in range(6)]
    lcb = aa.kernel.lines["BB"]
    assert pair.run(lambda: lcb.state is LineState.DOWN, duration=30)
    assert all(b.state is BlockState.QUEUED for b in aa.kernel.lists.send) and not lcb.active
    pair.channel("AA", "BB").reconnect()
    r = bb.client("R")
    assert [r.recv()["msg"]["msg_id"] for _ in sent] == sent
    assert r.recv(wait=False)["msg"] is None


def test_a_port_lost_while_the_sender_waits_for_its_wire_leaves_no_deadline_behind(tmp_path):
    """A USB adapter pulled under a queue at 9600 baud: the Message-Sender was waiting for its
    wire (next_hand) when the line went down. That wait ends with the line; left behind, a
    deadline in the past ran the daemon's passes back to back, a core at 100%, until the port
    came back (found by `mccs bench scale`: a line that died the same way)."""
    import base64
    from mccs.config import LineConfig
    net = SimNet(tmp_path, {a: [LineConfig(peer=b, port=f"sim://{b}")] for a, b in (("AA", "BB"), ("BB", "AA"))})
    for side in "ab":
        net.channel("AA", "BB").outof(side).imp.baud = 9600
    aa, lcb = net["AA"], net["AA"].kernel.lines["BB"]
    assert net.run(lambda: lcb.state is LineState.UP, duration=30)
    p = aa.client("P")
    for i in range(40):
        p.request({"op": "send", "to": "BBR", "data": base64.b64encode(bytes(100)).decode(), "user_id": i + 1})
    assert net.run(lambda: lcb.next_hand is not None, duration=10)  # the sender waits for the wire
    aa.port_state("BB", False, "unplugged")
    before = len(aa.passes)
    net.run(duration=2.0)
    assert len(aa.passes) - before < 20  # (it was 20,000: a pass every step of the simulator)
    assert lcb.state is LineState.DOWN and lcb.next_hand is None
    aa.port_state("BB", True, "")
    r = net.client("BB", "R")
    assert [r.recv()["msg"]["user_id"] for _ in range(40)] == list(range(1, 41))


def test_the_simulated_port_hands_a_paced_frame_over_in_one_read_and_a_piece_alone_after_a_while(tmp_path):
    """Frame abort at the defaults writes a frame longer than its pace in pieces (120 bytes at
    9600 baud: three); the simulator's port hands the
    receiver the frame when its last piece has come (one read, not one a piece: what makes a
    large network cheap to simulate), and a piece whose rest never comes, its sender killed,
    within HELD_AT_MOST."""
    import base64
    from mccs.config import LineConfig
    from mccs.testbed.hostsim import HELD_AT_MOST
    net = SimNet(tmp_path, {a: [LineConfig(peer=b, port=f"sim://{b}")] for a, b in (("AA", "BB"), ("BB", "AA"))})
    for side in "ab":
        net.channel("AA", "BB").outof(side).imp.baud = 9600
    aa, bb = net["AA"], net["BB"]
    assert net.run(lambda: bb.kernel.lines["AA"].state is LineState.UP, duration=30)
    reads: list[bytes] = []
    feed = bb.line_data
    bb.line_data = lambda peer, data: (reads.append(data), feed(peer, data))[1]
    p, r = aa.client("P"), bb.client("R")
    for i in range(5):
        p.request({"op": "send", "to": "BBR", "data": base64.b64encode(bytes(120)).decode(), "user_id": i + 1})
    assert [r.recv()["msg"]["user_id"] for _ in range(5)] == [1, 2, 3, 4, 5]
    assert reads and all(data[-1] == 0x7E for data in reads)  # (a frame ends with its flag)
    assert max(map(len, reads)) > 120 and aa.kernel.lines["BB"].machine.counters.get("retransmissions", 0) == 0
    reads.clear()
    p.request({"op": "send", "to": "BBR", "data": base64.b64encode(bytes(120)).decode()})
    assert net.run(lambda: aa.write_at is not None, duration=5)  # a frame partly written
    del net.hosts["AA"]  # killed (as bench scale kills a host): the rest is never written
    at = net.now
    net.run(lambda: any(data[-1] != 0x7E for data in reads), duration=HELD_AT_MOST + 0.5)
    assert any(data[-1] != 0x7E for data in reads) and net.now - at <= HELD_AT_MOST + 0.5


def test_a_pass_runs_only_the_lines_it_has_something_for(tmp_path):
    """A hub of six lines forwards a stream between two of its leaves, every default but the
    simulator's short timers: the passes that carry it do not look at the four idle lines'
    machines (a pass the size of its event, issue 36); those lines still keep their own time
    (keep-alives) and carry a message when one comes."""
    import base64
    leaves = [f"L{i}" for i in range(1, 7)]
    net = SimNet(tmp_path, {"HB": [line(leaf) for leaf in leaves], **{leaf: [line("HB")] for leaf in leaves}})
    hub = net["HB"]
    assert net.run(lambda: all(net[leaf].kernel.known_host(other) for leaf in leaves for other in leaves), duration=30)
    asked: dict[str, int] = {leaf: 0 for leaf in leaves}
    for leaf in leaves:
        machine = hub.kernel.lines[leaf].machine
        def counted(deadline=machine.next_deadline, leaf=leaf):
            asked[leaf] += 1
            return deadline()
        machine.next_deadline = counted
    p, r = net.client("L1", "P"), net.client("L2", "R")
    before = len(hub.passes)
    for i in range(60):
        p.request({"op": "send", "to": "L2R", "data": base64.b64encode(bytes(100)).decode(), "user_id": i + 1})
    assert [r.recv()["msg"]["user_id"] for _ in range(60)] == list(range(1, 61))
    passes = len(hub.passes) - before
    assert passes > 30 and asked["L1"] > 30 and asked["L2"] > 30
    assert all(asked[leaf] <= passes // 5 for leaf in leaves[2:]), (passes, asked)  # (before: twice each pass)
    q = net.client("L6", "R")
    net.client("L5", "P").request({"op": "send", "to": "L6R", "data": "aGk=", "user_id": 1})
    assert q.recv()["msg"]["user_id"] == 1


def test_a_full_recv_list_makes_the_line_busy_and_loses_nothing(tmp_path):
    net = SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA")]}, buffers=3)
    p, r = net.client("AA", "P"), net.client("BB", "R")
    rids = [p.request({"op": "send", "to": "BBR", "data": "eA==", "user_id": i + 1}) for i in range(10)]
    net.run(duration=3)
    assert net["BB"].kernel.status()["lists"]["recv"] <= 4  # the bound, plus the line's one buffer
    assert net["BB"].kernel.lines["AA"].busy
    assert [r.recv()["msg"]["user_id"] for _ in rids] == list(range(1, 11))
    assert all(net.run(lambda: p.reply(rid))["ok"] for rid in rids)


def test_disk_full_refuses_new_messages_while_deliveries_go_on(pair):
    aa, bb = pair["AA"], pair["BB"]
    p, r = aa.client("P"), bb.client("R")
    p.send("BBR", b"before")
    pair.run(lambda: bb.kernel.status()["lists"]["recv"] == 1)
    bb.set_disk_full(True)
    assert bb.client("S").send("BBR", b"x")["code"] == "disk_full"
    assert _data(r.recv()) == b"before"  # RECV and confirm go on
    p.send("BBR", b"held")
    pair.run(duration=2)
    assert bb.kernel.lines["AA"].busy and bb.kernel.status()["lists"]["recv"] <= 1
    bb.set_disk_full(False)
    assert _data(r.recv()) == b"held"



def test_a_recv_that_waits_with_the_confirms_it_carries_needs_no_pass_of_its_own(tmp_path):
    """Kernel.request says within how long a pass must run for it: a RECV that will wait, with
    nothing here for it, leaves the deletes of the confirms it carries to the next pass that has
    something to do (CONFIRM_WAIT at most, its timeout if shorter); anything a pass must act on
    at once (a message there for it, a wait=False, a buffer freed on a full RECV_LIST) runs one."""
    import itertools

    from mccs.core import requests
    from mccs.core.kernel import CONFIRM_WAIT
    net = SimNet(tmp_path, {"AA": [line("BB")]}, buffers=3)
    host = net["AA"]
    s, r = host.client("S"), host.client("R")
    rids = itertools.count(100)

    def recv(**keys) -> tuple[int, float]:
        rid = next(rids)
        return rid, host.kernel.request(r.conn, rid, requests.parse({"op": "recv", **keys}), net.now)

    def deletes(fx) -> int:
        return sum(c.sql.startswith(f"DELETE FROM {Table.RECV_LIST}") for c in fx.changes)

    s.send("AAR", b"one")
    rid, within = recv()
    assert within == 0  # "one" is there for it
    host.run_pass()
    rid, within = recv(confirm=r.reply(rid)["msg"]["rid"])
    assert within == CONFIRM_WAIT  # it waits: the delete needs no pass now
    assert deletes(host.run_pass()) == 1 and r.reply(rid) is None  # the next pass commits it; the RECV waits
    s.send("AAR", b"two")
    rid, within = recv(confirm=r.reply(rid)["msg"]["rid"], timeout=0.25)
    assert within == 0.25  # its timeout comes first
    host.run_pass()
    s.send("AAR", b"three")
    s.send("AAR", b"four")
    rid, within = recv(confirm=r.reply(rid)["msg"]["rid"])
    assert within == 0  # "four" is there for it
    host.run_pass()
    handed = r.reply(rid)["msg"]["rid"]
    rid, within = recv(wait=False)
    assert within == 0 and host.run_pass() and r.reply(rid)["msg"] is None
    s.send("AAQ", b"five")
    s.send("AAQ", b"six")  # with "four" handed: RECV_LIST at its 3 buffers
    rid, within = recv(confirm=handed)
    assert within == 0  # the confirm frees a buffer of a full RECV_LIST: a pass at once
    assert deletes(host.run_pass()) == 1

# -- bounds and permissions -----------------------------------------------------------------------
def test_a_pass_looks_only_at_the_processes_whose_mailbox_changed(alone, monkeypatch):
    host = alone["AA"]
    idle = host.client("IDLE")
    for _ in range(2000):
        idle.request({"op": "recv"})
    alone.step()
    calls = []
    real = Mailbox.match
    monkeypatch.setattr(Mailbox, "match", lambda self, f, u, r=0: calls.append(1) or real(self, f, u, r))
    busy, s = host.client("BUSY"), host.client("S")
    s.send("AABUSY", b"x")
    assert _data(busy.recv()) == b"x"
    assert len(calls) <= 3


def test_a_reserved_name_needs_its_owner(tmp_path):
    procs = {"AA": [ProcessConfig("LEDG", uid=1000), ProcessConfig("OPS", gid=50), ProcessConfig("FREE")]}
    net = SimNet(tmp_path, {"AA": []}, processes=procs, strict_names=True)
    host = net["AA"]

    def hello(name, uid, gid):
        return host.client(None, Creds(123, uid, gid)).ask({"op": "hello", "name": name})
    assert hello("LEDG", 1000, 1000)["ok"]
    assert hello("LEDG", 1001, 1000)["code"] == "not_permitted"
    assert hello("OPS", 1001, 50)["ok"]
    assert hello("FREE", 4242, 4242)["ok"]
    assert hello("ANY", 0, 0)["code"] == "not_permitted"  # strict_names: only configured names


def test_cancel_takes_back_a_waiting_send(tmp_path):
    net = SimNet(tmp_path, {"AA": []}, buffers=1)
    host = net["AA"]
    s, r = host.client("S"), host.client("R")
    s.send("AAR", b"1")
    rid = s.request({"op": "send", "to": "AAR", "data": "Mg==", "req": "two"})
    net.run(duration=0.2)
    assert s.ask({"op": "cancel", "req": "two"})["cancelled"] is True
    assert s.reply(rid)["code"] == "cancelled"
    assert _data(r.recv()) == b"1"
    assert r.recv(wait=False)["msg"] is None
    stored = s.send("AAR", b"3", req="three")["msg_id"]
    late = s.ask({"op": "cancel", "req": "three"})  # stored already: the cancel says which MSG_ID it got
    assert (late["cancelled"], late["msg_id"], late["to"]) == (False, stored, "AAR   ")


def test_the_line_machines_draw_their_sessions_and_nonces_from_the_source_the_shell_gives(tmp_path):
    """The core does not reach for `secrets`: the simulator seeds the machines' random source, so
    a run is the same run again (the daemon gives them secrets.token_bytes)."""
    import re

    def first_session(path, seed):  # (each checkpoint has an epoch of its own: only the SESSION is compared)
        net = SimNet(path, {"AA": [line("BB")], "BB": [line("AA")]}, seed=seed)
        signon = next(w.data for w in net["AA"].run_pass().writes if w.peer == "BB")
        return re.search(rb"SESSION=(\w+)", signon).group(1)
    same = first_session(tmp_path / "a", 1), first_session(tmp_path / "b", 1)
    assert same[0] == same[1] and first_session(tmp_path / "c", 2) != same[0]


def test_the_simulated_hosts_keep_their_checkpoint_in_memory_through_a_crash(tmp_path):
    """Unit tests touch no disk: the simulator's checkpoint is the daemon's store in memory, and a
    crash (memory rebuilt from it) keeps what was committed."""
    net = SimNet(tmp_path, {"AA": [line("BB")]})
    net.client("AA", "P").send("AAR", b"kept")
    net["AA"].crash()
    assert net.client("AA", "R").recv()["msg"] is not None
    assert list(tmp_path.iterdir()) == []  # no checkpoint file, no lock, no WAL


def test_the_pieces_of_a_paced_frame_are_written_without_a_pass(tmp_path, monkeypatch):
    """With frame abort a long frame goes to the port in pieces (AsyncLine.next_write); the driver
    writes them through Kernel.write_paced, which changes, traces and answers nothing: a piece costs
    no pass (at 9600 baud a pass every 20 ms while a frame went, before)."""
    lines = {"AA": [line("BB", baud=9600, frame_abort=True)], "BB": [line("AA", baud=9600, frame_abort=True)]}
    net = SimNet(tmp_path, lines)
    for side in "ab":
        net.channel("AA", "BB").towards(side).imp.baud = 9600
    assert net.run(lambda: net["AA"].kernel.lines["BB"].state.name == "UP", duration=30)
    aa, written = net["AA"], []

    def write_paced(now, real=aa.kernel.write_paced):
        fx = real(now)
        written.append(fx)
        return fx
    monkeypatch.setattr(aa.kernel, "write_paced", write_paced)
    p, passes = net.client("AA", "P"), aa.pass_count
    for i in range(20):
        p.request({"op": "send", "to": "BBR", "data": base64.b64encode(bytes(120)).decode(), "user_id": i + 1})
    assert net.run(lambda: len(net["BB"].kernel.lists.recv) == 20, duration=60)
    pieces = [w for fx in written for w in fx.writes if w.data]
    assert len(pieces) >= 20 and not any(fx.changes or fx.traces or fx.replies for fx in written)
    assert aa.pass_count - passes <= 3 * 20  # (60; 44 without frame abort, 181 when every piece took a pass)
