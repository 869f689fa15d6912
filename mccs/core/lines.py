"""The lines of one host: a Line Control Block per `[[line]]`, the Message-Receiver and the
Message-Sender (paper, Figure 2), around the protocols' sans-I/O state machines.

No port, thread or clock here: the shell hands in the bytes that arrived and the port's state,
and takes out the bytes to write. The Message-Receiver turns a machine's events into changes of
the lists (an arrived message goes on RECV_LIST with its duplicate-window key, an acknowledged
one leaves SEND_LIST); the machine is told to acknowledge (`confirm()`) in the same pass, but
its bytes are written only after the shell has committed the pass (durable before ACK). The
Message-Sender hands SEND_LIST's blocks, in order, to lines that are UP and have room; a line
that goes DOWN gives its blocks back (they never left SEND_LIST) and signs on again after a
back-off.

Priorities: the Message-Sender serves the streams of higher priority first, and hands a line no
more than it puts on the wire in the next few hundredths of a second (its lead, by the line's
baud) before a frame more (a BSC machine takes one image at a time: its room()): what waits stays
on SEND_LIST, where a message of higher priority can still overtake it. A message of higher
priority than the last handed goes at once, lead or not: the machine sends it before what it has
not begun, and on a line that agreed ABORT cuts the frame on the wire short (docs/PROTOCOL.md), so
it waits about 50 ms (the machine's pace) instead of a long frame on the wire.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Callable, Iterator, TypeGuard

from checkpoint import changes as ch
from checkpoint.changes import DOUBT, LOOSE, Stored, Table
from linedrivers import (FrameTraced, LineDown, LineEvent, LineUp, MessageAcked, MessageReceived,
                         PeerRefused, image)
from linedrivers.call_line import CallLine, CallTraced

from mccs.core import e2e, envelope, segments
from mccs.config import LineConfig
from mccs.core.custody import Custody
from mccs.core.effects import Effects
from mccs.core.envelope import Envelope
from mccs.core.epochs import PeerEpochs
from mccs.core.lists import MSGBLOK, BlockState
from mccs.core.machine import ROUTE, LineMachine
from mccs.core.notices import DAEMON_ROOM, fields, is_daemon
from mccs.core.receiver import Arrival, MessageReceiver
from mccs.core.replies import CallAnswer
from mccs.core.requests import Code, LineRequest, RequestError
from mccs.core.routing import SEQROUTE
from mccs.core.schedule import Schedule
from mccs.core.segments import FORGET, Forget, Forgets
from mccs.core.host import HostState

log = logging.getLogger("mccs.core.lines")

BACKOFF_MIN = 0.5
#: How often a line whose peer routed before, and now signs on without routing, signs on again.
SIGN_ON_AGAIN = 3
#: Seconds of bytes a line may have queued ahead of its wire (its lead) at least; then the
#: Message-Sender waits. Small beside a frame at 9600 baud (147 ms): `mccs bench network --parts urgent`.
LEAD = 0.04
#: ... and at most, on a line whose frames are short: the lead is URGENT_WAIT less the last frame
#: handed, so that a frame like it on the wire and the lead, what an urgent message may wait
#: behind, stay within URGENT_WAIT.
#: A longer lead hands more frames a pass: at 115200 baud (13 ms a 128-byte message) each of the
#: Message-Sender's own passes hands about five frames instead of one or two, and a sending
#: daemon's CPU a message halves (BENCHMARKS.md, issue 15).
URGENT_WAIT = 0.1
#: Seconds of bytes still ahead of the wire when the Message-Sender's own pass comes to hand
#: more (up to the lead again); enough for that pass and its commit to come before the wire
#: falls idle. The passes that come anyway (an acknowledgement, a SEND) hand what fits before then.
REFILL = 0.02
#: Seconds a frame that is only to be traced may wait for the pass that writes its trace line.
TRACE_DELAY = 0.05
#: The frames behind held messages are read this long before the hold ends, for its pass.
READ_EARLY = 0.002
#: The longest a frame's length is waited for (wanted) when it is guessed (as long as the last) or told
#: by a header that noise may have damaged: a shorter frame is read no later.
GUESS_WAIT = 0.05
#: Custody's own messages (LOOSE: states, probes) wait for a peer that holds a half-duplex line
#: (BSC) to give it up, rather than ask for it (RVI: two turnarounds, 80 ms at 9600 baud beside the
#: state's 120), at most as long as this many bytes take on the line: 10 s at 9600 baud, under 1 s
#: at 115200, about a state's worth of messages (custody.STATE_BATCH).
LOOSE_BYTES = 10_000
FRAME_BYTES = 12  # about what a frame adds to its image (flags, header, FCS, stuffing aside)
ADVERT_NAME = "MCCS"  # the process name routing updates are addressed to and from


def _damaged(ev: object) -> TypeGuard[FrameTraced]:
    """A received frame that failed its check: noise, mostly, which can come as thousands a second."""
    return isinstance(ev, FrameTraced) and ev.dir == "rx" and not ev.ok


class LineState(StrEnum):
    DOWN = "DOWN"
    SIGNING_ON = "SIGNING_ON"
    UP = "UP"


@dataclass
class Recent:
    """How much a counter grew over the last `span` seconds, from samples taken in the passes (at
    most one a second; a counter moves only in a pass, so that is exact to a second)."""
    span: float = 60.0
    samples: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)

    def sample(self, now: float, value: int) -> None:
        if not self.samples or now - self.samples[-1][0] >= 1.0:
            self.samples.append((now, value))
        while len(self.samples) > 1 and self.samples[1][0] <= now - self.span:
            self.samples.popleft()  # the newest one at or before the span's start stays: the baseline

    def increase(self, now: float, value: int) -> int:
        base = next((v for t, v in reversed(self.samples) if t <= now - self.span), None)
        if base is None:
            base = self.samples[0][1] if self.samples else value
        return max(0, value - base)  # a port lost gets a fresh machine: its counters start at 0 again


@dataclass(eq=False)
class LineControlBlock:
    cfg: LineConfig
    machine: LineMachine
    state: LineState = LineState.DOWN
    # handed to the machine, in order: (block, where the segment ends) or (block, None) for a whole one
    active: collections.deque[tuple[MSGBLOK, int | None]] = field(default_factory=collections.deque)
    must_confirm: bool = False  # messages received this pass: acknowledge them (bytes leave after the commit)
    busy: bool = False
    backoff: float = BACKOFF_MIN
    signon_at: float | None = None  # when to sign on again
    port_open: bool = False
    last_down: str = ""
    held: MSGBLOK | None = None  # the last MSGBLOK the peer cannot take (its maximum, no E2E1): it waits, and
    #                             all after it for the same host
    give_up: dict[int, tuple[MSGBLOK, float]] = field(default_factory=dict)  # by seq, each held block and the
    #                             monotonic time it is returned undeliverable (each its own: two streams held by
    #                             turns must not keep putting each other's off)
    backlog: list = field(default_factory=list)  # (machine event, when) taken outside the pass that handles them
    routed: bool = False  # this sign-on agreed on ROUTE: messages carry an envelope, routes are exchanged
    large: int = 0  # this sign-on: the largest message that may go in segments (LARGE=, the smaller); 0: none
    features: tuple[str, ...] = ()  # what this sign-on agreed beyond docs/DESIGN.md (FEAT= at both ends)
    routed_before: bool = False  # a sign-on on this line agreed on routing (since the daemon started)
    adverts_out: int = 0  # routing updates handed to the machine and not yet acknowledged
    downgrades: int = 0  # sign-ons without routing since, each answered by signing on again
    transfer: Transfer | None = None  # the last message sent in segments, for status
    segmented: dict[int, MSGBLOK] = field(default_factory=dict)  # by seq: carried in segments, pieces left to hand
    last_arrival: float | None = None  # monotonic time the last message came in (see Lines._ack_wait)
    hold_until: float | None = None  # the messages in the backlog wait for more until then at the latest
    last_frame: int = 1  # bytes of the frame of the last message received, about
    wire_free: float = 0.0  # monotonic time the images handed so far are out on the wire, at the baud
    frame_time: float = 0.0  # seconds the last frame handed takes on the wire, at the baud (0: none yet)
    next_hand: float | None = None  # the Message-Sender waits for the wire: run a pass then
    handed_priority: int = 0  # the priority of the last image handed: one above it does not wait for the wire
    counters: collections.Counter = field(default_factory=collections.Counter)
    retransmissions: Recent = field(default_factory=Recent)  # over the last minute, for status
    schedule: Schedule | None = None  # call = "schedule": when it may call (docs/CALLS.md)
    call_window: str = ""  # the schedule's window at the last pass: "open", or "closed until <local time>"
    window_check: float | None = None  # when a pass looks at the schedule again: the next minute (monotonic)
    due: float | None = None  # the earliest of the times above and the machine's, as the last pass running it left them

    @property
    def window(self) -> int:
        """Images that may be unacknowledged at once: the async window; BSC waits for each block."""
        return self.cfg.window if self.cfg.protocol == "async" else 1

    @property
    def peer(self) -> str:
        return self.cfg.peer

    def status(self, now: float) -> dict:
        return {"peer": self.peer, "protocol": self.cfg.protocol, "state": str(self.state), "port": self.cfg.port,
                "port_open": self.port_open, "baud": self.cfg.baud, "active": len(self.active),
                "window": self.window, "routing": self.routed, "large": self.large,
                "features": list(self.features), "last_down": self.last_down,
                "in_flight": list(dict.fromkeys(b.name for b, _ in self.active)),
                "retransmissions_last_minute": self.retransmissions.increase(
                    now, self.machine.counters.get("retransmissions", 0)),
                "counters": {**self.machine.counters, **self.counters},
                "held": f"{self.held.name}, {self.held.size} bytes" if self.held else None,
                "transfer": self.transfer.status() if self.transfer else None,
                **(self.machine.status(now) if isinstance(self.machine, CallLine) else {}),
                **({"window": self.call_window} if self.schedule else {})}


@dataclass(eq=False)
class Transfer:
    """Progress of a message going in segments on a line: bytes the next host holds, and the rate
    since this line took it up."""
    blk: MSGBLOK
    since: float  # monotonic time the line took it up
    start: int  # bytes held by the next host then
    at: float = 0.0  # monotonic time of the last acknowledgement

    def status(self) -> dict:
        blk = self.blk
        rate = (blk.acked - self.start) / (self.at - self.since) if self.at > self.since else 0.0
        left = blk.size - blk.acked
        return {"origin": blk.origin, "msg_id": blk.msg_id, "to_id": blk.to_id, "bytes": blk.acked,
                "total": blk.size, "rate": round(rate), "eta": round(left / rate, 1) if rate else None}


class Lines:
    """Every line of the host. `new_machine(lc)` builds a line's protocol machine."""

    def __init__(self, hs: HostState, new_machine: Callable[[LineConfig], LineMachine], receiver: MessageReceiver,
                 epochs: PeerEpochs, holds: Callable[[MSGBLOK, float], bool], custody: Custody,
                 forgets: Forgets | None = None):
        """A Line Control Block for each of the host's [[line]]s, its machine made by `new_machine`.
        `holds(blk, wall)`: does this origin keep the block back (its name's quota, mccs.core.control)?
        `custody`: where an acknowledged block of this origin may be kept (mccs.core.custody).
        `forgets`: those owed to next hosts, as restored (mccs.core.segments)."""
        self.host, self.max_message, self.blobs, self.epochs = hs.id, hs.cfg.max_message, hs.blobs, epochs
        self.too_large_wait = hs.cfg.too_large_wait  # a block the peer cannot take holds up the rest this long
        self._now = 0.0
        self.new_machine = new_machine
        self.lists, self.ids, self.seqs, self.counters = hs.lists, hs.ids, hs.seqs, hs.counters
        self.pairs, self.routes, self.receiver, self.holds, self.custody = hs.pairs, hs.routes, receiver, holds, custody
        self.keys, self.e2e_mode = hs.keys, e2e.SETTING[hs.cfg.e2e]
        self.lcbs = {lc.peer: LineControlBlock(lc, new_machine(lc), schedule=Schedule.of(lc.schedule) if lc.schedule
                                               else None) for lc in hs.cfg.lines}
        self.forgets = forgets or Forgets()
        # blocks in segments a next host holds the start of (acked_by), and the forget it gets if they do not end there
        self.holding: dict[int, tuple[MSGBLOK, Forget]] = {}
        # A pass runs the lines its inputs touched (bytes, a port, the operator), those whose time has
        # come, and those with something to send; the others are as the last pass left them (Lines.send).
        self._touched: set[str] = set(self.lcbs)
        self._ran: set[str] = set()  # the lines this pass's receive() ran
        self._busy = False
        for blk in self.lists.send:
            if blk.acked and blk.acked_by:
                self._holds(blk)

    def __getitem__(self, peer: str) -> LineControlBlock:
        return self.lcbs[peer]

    def status(self) -> list[dict]:
        return [{**lcb.status(self._now), "peer_epoch": self.epochs.known.get(peer)} for peer, lcb in self.lcbs.items()]

    def carrying(self, blk: MSGBLOK) -> bool:
        """Does a line's machine hold the block, or a segment of it, unacknowledged?"""
        return any(b is blk for lcb in self.lcbs.values() for b, _ in lcb.active)

    def let_go(self, blk: MSGBLOK) -> None:
        """A block no line holds is given up by the Message-Sender (it is purged, or made a void): it has
        no transfer in segments going, and is no longer the one too large for a peer."""
        blk.state, blk.line, blk.next_off = BlockState.QUEUED, None, blk.acked
        for lcb in self.lcbs.values():
            lcb.segmented.pop(blk.seq, None)
            if lcb.transfer is not None and lcb.transfer.blk is blk:
                lcb.transfer = None
            if lcb.held is blk:
                lcb.held = None
            lcb.give_up.pop(blk.seq, None)

    def give_up(self, blk: MSGBLOK, fx: Effects) -> None:
        """The Message-Sender stops trying a block (it is returned or purged): what a next host
        holds of its segments is dropped there when nothing more comes for it."""
        if blk.acked:
            fx.change(ch.delete_acked(blk.seq))
            blk.acked = 0
        self.let_go(blk)

    def overdue(self, now: float) -> list[MSGBLOK]:
        """The blocks held for a peer's maximum for too_large_wait: to be returned, so that those
        behind them go (a next host that can never take a message must not stop the others)."""
        out: list[MSGBLOK] = []
        for lcb in self.lcbs.values():
            for seq, (blk, at) in list(lcb.give_up.items()):
                if blk not in self.lists.send:  # gone another way meanwhile (another route, expired, purged)
                    del lcb.give_up[seq]
                elif at <= now and not self.carrying(blk):
                    lcb.counters["too_large_returned"] += 1
                    if not any(b is blk for b in out):
                        out.append(blk)
        return out

    # -- inputs from the shell ----------------------------------------------------------------
    def data(self, peer: str, data: bytes, now: float) -> float | None:
        """Feed the line's machine; return within how many seconds a pass should handle the events
        that made (None: no events). Every frame or block a machine takes, good or bad, is an
        event (FrameTraced), so bytes that only add to a frame still arriving make none, and need
        no pass: a serial port delivers a frame in many small reads. A frame that is only to be
        traced (a block of a segment, an acknowledgement) waits up to TRACE_DELAY, stamped with
        the time it came, so the passes of a busy line do not fall between a block and its answer."""
        lcb = self.lcbs[peer]
        self._touched.add(peer)
        lcb.machine.receive_data(data, now)
        new = lcb.machine.events()
        for ev in new:
            if _damaged(ev) and lcb.backlog and _damaged(last := lcb.backlog[-1][0]) and last.kind == ev.kind:
                last.count += 1  # noise: one trace line for a run of damaged frames, not one each
                last.nbytes += ev.nbytes
            else:
                lcb.backlog.append((ev, now))
        if not lcb.backlog:
            return None
        if all(isinstance(ev, FrameTraced) for ev, _ in lcb.backlog):
            return TRACE_DELAY
        return self._ack_wait(lcb, [ev for ev in new if isinstance(ev, MessageReceived)], now)

    def _ack_wait(self, lcb: LineControlBlock, arrived: list[MessageReceived], now: float) -> float:
        """Within how many seconds the pass must store the messages just received: at once, unless
        the peer is streaming (this message came about one frame time after the last) and may send
        more before it needs our acknowledgement. Then they wait for the frames behind, up to the
        line's `ack_hold` after the first, so that one pass, one commit and one acknowledgement take
        several messages (issue 15); the wait ends at once when the next frame could not come in
        time. A lone message, a stop-and-wait line (BSC) and any event but a message never wait."""
        if (lcb.machine.unconfirmed_room() < 2
                or not all(isinstance(ev, (FrameTraced, MessageReceived)) for ev, _ in lcb.backlog)):
            lcb.hold_until = None
            return 0.0
        if not arrived:  # bytes of the next frame, or a frame only to trace: a wait goes on
            return 0.0 if lcb.hold_until is None else max(0.0, lcb.hold_until - now)
        lcb.last_frame = len(arrived[-1].image) + FRAME_BYTES
        streaming = _streaming(lcb, now)
        lcb.last_arrival = now
        until = now + lcb.cfg.ack_hold if lcb.hold_until is None else lcb.hold_until
        lcb.hold_until = until if streaming and now + _frame_time(lcb) <= until else None
        return 0.0 if lcb.hold_until is None else until - now

    def answers(self, peer: str) -> bytes:
        """The bytes the line's machine made from the data just fed: the shell writes them at
        once, not after the next pass, since a stop-and-wait line loses that time on every
        block. Safe because no machine sends what needs the checkpoint first: the answer to a
        message waits for confirm(), which only a pass makes, after its commit."""
        return self.lcbs[peer].machine.data_to_send()

    def wanted(self, peer: str, now: float) -> int:
        """Bytes the line's machine needs before its next event can come (a frame whose length its
        header told): the shell may let them gather instead of feeding every few. While received
        messages wait for a streaming peer's frames (_ack_wait), and when the next frame of a
        stream is on its way (it will wait too), nothing is done with those frames before the wait
        ends, so they gather until just before it (READ_EARLY), as many as the peer's window lets
        come before a wait must end, and are read at once: a thread that wakes costs a daemon far
        more than the frame it reads (BENCHMARKS.md). Not while frames of ours wait for the
        acknowledgements theirs carry: then the next frame is taken to be as long as the last.
        A length guessed or told by a header is waited for GUESS_WAIT at most."""
        lcb = self.lcbs[peer]
        char = lcb.cfg.char_time()
        most = max(1, int(GUESS_WAIT / char))
        wanted, guess = min(lcb.machine.bytes_wanted(), most), min(lcb.last_frame, most)  # guess: as the last
        room = lcb.machine.unconfirmed_room()  # frames the peer may send: a wait ends before they run out
        if lcb.hold_until is not None:
            until = lcb.hold_until
        elif wanted > 1 and _streaming(lcb, now) and _frame_time(lcb) <= lcb.cfg.ack_hold:
            # the next frame of a stream is coming, and frames are short enough to be held: it will wait too
            until = now + wanted * char + lcb.cfg.ack_hold
            room += sum(isinstance(ev, MessageReceived) for ev, _ in lcb.backlog)  # confirmed by the pass now due
        else:
            return wanted
        if lcb.active:
            return guess if wanted == 1 else wanted
        gather = min(int((until - READ_EARLY - now) / char), max(1, room - 1) * lcb.last_frame)
        return max(wanted, guess, gather)

    def operator(self, req: LineRequest, now: float) -> CallAnswer:
        """`mccs line call|hangup`: a call made or ended now (RequestError if the line is no call)."""
        lcb = self.lcbs.get(req.peer)
        if lcb is None:
            raise RequestError(Code.BAD_REQUEST, f"this host has no line to {req.peer}")
        machine = lcb.machine
        if not isinstance(machine, CallLine):
            raise RequestError(Code.BAD_REQUEST, f"the line to {req.peer} is not a call (it has no dial or answer)")
        self._touched.add(req.peer)
        if req.action == "hangup":
            machine.hang_up(now, "the operator hung up")
        elif not lcb.cfg.dial:
            raise RequestError(Code.BAD_REQUEST, f"the line to {req.peer} has no number to dial (it answers only)")
        else:
            machine.call(now, force=True)
        return CallAnswer(req.peer, machine.status(now))

    def port_state(self, peer: str, is_open: bool, why: str, now: float, fx: Effects,
                   modem_lines: bool = False) -> None:
        """The port opened (`modem_lines`: it has DTR and DCD) or was lost."""
        lcb = self.lcbs[peer]
        self._touched.add(peer)
        lcb.port_open = is_open
        if is_open:
            if isinstance(lcb.machine, CallLine):
                lcb.machine.modem_lines(modem_lines)
            self._sign_on(lcb, now)
        else:  # the port is gone (cable, adapter, pty): a fresh machine when it is back
            self._down(lcb, f"port lost: {why}", now, fx)
            lcb.machine = self.new_machine(lcb.cfg)
            lcb.busy = False  # the fresh machine is not busy: told again in this pass
            lcb.signon_at = None

    def carrier(self, peer: str, on: bool, now: float) -> None:
        """The port's DCD changed (a port with modem lines, on a line that is a call)."""
        machine = self.lcbs[peer].machine
        self._touched.add(peer)
        if isinstance(machine, CallLine):
            machine.carrier(on, now)

    def _write(self, lcb: LineControlBlock, fx: Effects) -> None:
        """What the line's machine has to send, and a call's DTR where it changes."""
        fx.write(lcb.peer, lcb.machine.data_to_send(self._now))
        if isinstance(lcb.machine, CallLine) and (level := lcb.machine.dtr_change()) is not None:
            fx.set_dtr(lcb.peer, level)

    def stop(self, now: float, fx: Effects) -> None:
        """Sign off every line that is not down."""
        for lcb in self.lcbs.values():
            if lcb.state is not LineState.DOWN:
                lcb.machine.stop(now)
                self._write(lcb, fx)

    # -- in the pass: timers and the Message-Receiver --------------------------------------------
    def receive(self, fx: Effects, now: float, wall: float) -> None:
        """The Message-Receiver of the lines touched since the last pass, or whose time has come."""
        self._now = now
        ran = [lcb for peer, lcb in self.lcbs.items()
               if peer in self._touched or (lcb.due is not None and lcb.due <= now)]
        self._ran, self._touched = {lcb.peer for lcb in ran}, set()
        for lcb in ran:
            if lcb.signon_at is not None and now >= lcb.signon_at:
                self._sign_on(lcb, now)
            if not self._on_deadline(lcb, now) and lcb.hold_until is not None and now < lcb.hold_until:
                continue  # the messages received wait for the next frame (_ack_wait)
            lcb.hold_until = None
            events, lcb.backlog = lcb.backlog + [(ev, now) for ev in lcb.machine.events()], []
            for ev, at in events:
                if isinstance(ev, FrameTraced):
                    self._trace_frame(lcb, ev, fx, wall - (now - at))
                else:
                    self._event(lcb, ev, fx, now, wall)
            lcb.retransmissions.sample(now, lcb.machine.counters.get("retransmissions", 0))

    @staticmethod
    def _on_deadline(lcb: LineControlBlock, now: float) -> bool:
        """Let the machine act on its deadline if that has come; whether it had."""
        deadline = lcb.machine.next_deadline()
        if deadline is None or now < deadline:
            return False
        lcb.machine.handle_timeout(now)
        return True

    def _sign_on(self, lcb: LineControlBlock, now: float) -> None:
        lcb.signon_at = None
        if lcb.state is LineState.DOWN:
            lcb.state = LineState.SIGNING_ON
        lcb.machine.start(now)

    def _down(self, lcb: LineControlBlock, reason: str, now: float, fx: Effects) -> None:
        """Every MSGBLOK the line held goes back to waiting, in order; they never left SEND_LIST."""
        for blk in [*(b for b, _ in lcb.active), *lcb.segmented.values()]:
            blk.state, blk.next_off, blk.line = BlockState.QUEUED, blk.acked, None
        lcb.active.clear()
        lcb.segmented.clear()
        lcb.must_confirm = False
        lcb.hold_until = lcb.last_arrival = None  # what was received goes to the next pass
        lcb.next_hand = None  # (no wire to wait for: a deadline left here would run passes back to back)
        if lcb.routed:
            lcb.routed = False
            fx.change(*self.routes.line_down(lcb.peer, now))  # (a line that is a call stays a route: routing)
        if lcb.state is LineState.UP:
            fx.trace("line", "down", lcb.peer, lcb.cfg.protocol, reason=reason)
            log.warning("%s: line to %s down: %s", self.host, lcb.peer, reason)
        lcb.state, lcb.last_down = LineState.DOWN, reason
        if lcb.port_open:
            lcb.signon_at = now + lcb.backoff
            lcb.backoff = min(lcb.backoff * 2, lcb.cfg.backoff_max)

    def _event(self, lcb: LineControlBlock, ev, fx: Effects, now: float, wall: float) -> None:
        proto = lcb.cfg.protocol
        if isinstance(ev, MessageReceived):
            lcb.must_confirm = True  # whatever happens to it, the peer must stop sending it
            self.receiver.received(Arrival(lcb.peer, proto, lcb.counters), ev.image, lcb.routed, fx, now, wall)
        elif isinstance(ev, MessageAcked):
            self._acked(lcb, ev.image, fx)
        elif isinstance(ev, LineUp):
            lcb.state, lcb.backoff = LineState.UP, BACKOFF_MIN
            lcb.counters["ups"] += 1
            lcb.routed, lcb.features, lcb.adverts_out = ROUTE in ev.features, tuple(sorted(ev.features)), 0
            lcb.large = ev.large if lcb.routed else 0
            self._epoch(lcb, ev.epoch, fx)
            fx.change(*self.routes.line_up(lcb.peer, now, lcb.routed, SEQROUTE in ev.features))
            fx.trace("line", "up", lcb.peer, proto, baud=lcb.cfg.baud, routing=lcb.routed)
            log.info("%s: line to %s up (%s)", self.host, lcb.peer, proto)
            self._check_downgrade(lcb, now, fx)
        elif isinstance(ev, LineDown):
            if ev.reason.startswith("refused"):  # "refused", or "refused: " and the peer's note
                fx.trace("line", "signon_refused", lcb.peer, proto, reason=f"{ev.reason} by the peer")
            self._down(lcb, ev.reason, now, fx)
        elif isinstance(ev, PeerRefused):
            lcb.counters["refused"] += 1
            why = ev.reason or f"sign-on from {ev.peer!r}, not {lcb.peer!r}"
            fx.trace("line", "signon_refused", lcb.peer, proto, reason=why)
            log.warning("%s: refused a sign-on on the line to %s: %s", self.host, lcb.peer, why)
        elif isinstance(ev, LineEvent):
            fx.trace("line", ev.kind, lcb.peer, proto, reason=ev.detail or None)
        elif isinstance(ev, CallTraced):
            fx.trace("call", ev.kind, lcb.peer, proto, result=ev.result or None, duration=ev.duration, bytes=ev.bytes)
            log.info("%s: call on the line to %s: %s %s", self.host, lcb.peer, ev.kind, ev.result)

    def _check_downgrade(self, lcb: LineControlBlock, now: float, fx: Effects) -> None:
        """A peer that routed on this line before signed on without routing: on a noisy BSC line its
        announcement was most likely lost (bsc_agree: then both ends sign on as version 1), and
        numbered messages would wait for the next sign-on. Sign off and on again, a few times; a
        peer that keeps signing on so (an older MCCS put back) is then taken as it is. So too a BSC
        line's first sign-on without routing: two stations that start at once can lose the
        announcement to their bids' race, and then the peer's epoch too, whose next incarnation's
        MSG_IDs would be taken for duplicates of what came without a number."""
        if lcb.routed:
            lcb.routed_before, lcb.downgrades = True, 0
        elif (lcb.routed_before or lcb.cfg.protocol == "bsc") and lcb.downgrades < SIGN_ON_AGAIN:
            lcb.downgrades += 1
            lcb.counters["signed_on_again"] += 1
            lcb.machine.stop(now)
            self._down(lcb, f"signed on without routing (try {lcb.downgrades} of {SIGN_ON_AGAIN} to sign on "
                            "again)", now, fx)

    def _epoch(self, lcb: LineControlBlock, epoch: str, fx: Effects) -> None:
        """The peer signed on with `epoch`: if it is a new one, forget what was kept of the old
        incarnation (mccs.core.epochs), in this pass, before anything it sends now is received."""
        renewed, changes = self.epochs.signed_on(lcb.peer, epoch)
        fx.change(*changes)
        if not renewed:
            return
        peer = lcb.peer
        fx.change(*self.receiver.forget(peer), *self.ids.sent.forget(peer), *self.pairs.out.restart(peer))
        for blk in self.lists.send:
            if blk.acked and self.routes.next_hop(blk.dest) == peer:  # the old incarnation held its first bytes
                self._from_the_start(blk, fx)
            if (blk.pseq and blk.dest == peer and blk.origin == self.host  # numbered again as it leaves
                    and (peer, blk.priority) not in self.pairs.out.kept):  # (unless kept: a probe resynchronises)
                blk.pseq, blk.epoch = 0, ""
                fx.change(ch.set_pseq(Table.SEND_LIST, blk.seq, 0, ""))
        self.custody.renewed(peer)
        lcb.counters["peer_renewed"] += 1
        fx.trace("line", "epoch", peer, lcb.cfg.protocol, epoch=epoch)
        log.warning("%s: %s signed on with a new epoch %s (its checkpoint was started afresh): its old MSG_IDs "
                    "and what it held are forgotten", self.host, peer, epoch)

    @staticmethod
    def _trace_frame(lcb: LineControlBlock, ev: FrameTraced, fx: Effects, at: float | None = None) -> None:
        fx.trace("frame", ev.kind, lcb.peer, lcb.cfg.protocol, dir=ev.dir, bytes=ev.nbytes, ok=ev.ok, seq=ev.seq,
                 origin=ev.origin, msg_id=ev.msg_id, retransmit=ev.retransmit or None,
                 frames=ev.count if ev.count > 1 else None, at=at)

    def _acked(self, lcb: LineControlBlock, img: bytes, fx: Effects) -> None:
        """The acknowledgement of exactly one block: the oldest in flight on this line with its key."""
        key = image.key_of(img)
        i = next((i for i, (b, _) in enumerate(lcb.active) if b.key == key), None)
        if i is None:
            if key == (self.host, 0):  # a routing update or a forget: the daemon's own, no MSGBLOK
                self._daemon_acked(lcb, img, fx)
            else:
                lcb.counters["stray_acks"] += 1
            return
        blk, end = lcb.active[i]
        del lcb.active[i]
        if end is not None:  # a segment: the next host holds the message up to its end
            blk.acked, blk.acked_by = end, lcb.peer
            if lcb.transfer is not None and lcb.transfer.blk is blk:
                lcb.transfer.at = self._now
            if end < blk.size:
                self._holds(blk)  # (a forget still owed to it for the block is void: it holds what it acknowledged)
                fx.change(ch.set_acked(blk.seq, end, lcb.peer), *self.forgets.done(lcb.peer, blk.from_id, blk.msg_id))
                return
            self.holding.pop(blk.seq, None)  # the transfer ended there
            fx.change(ch.delete_acked(blk.seq))
        self.lists.send.remove(blk)
        if self.custody.keeps(blk):  # the destination has not taken it yet: its origin keeps a copy
            self.custody.keep(fx, blk, lcb.peer)
        else:
            if blk.origin == self.host:
                self.ids.release(blk.msg_id)
            fx.change(ch.delete_block(Table.SEND_LIST, blk.seq))
        fx.trace("msg", "acked", lcb.peer, lcb.cfg.protocol, **fields(blk))
        self.counters["acked"] += 1

    # -- acknowledgements, busy, the Message-Sender, bytes out ------------------------------------
    def send(self, fx: Effects, busy: bool, wall: float) -> None:
        """After the pass's changes: acknowledge, say busy, hand blocks over, collect the bytes.
        The shell writes them only once the changes are committed. A line runs here if receive()
        ran it or it may have something to send; another has nothing new (no input, no time come,
        nothing for it): passing it by is what keeps a pass the size of its event on a hub."""
        self._settle(fx)
        streams = self._streams()
        every, self._busy = busy != self._busy or bool(self.forgets.owed), busy
        for lcb in self.lcbs.values():
            if not (every or lcb.peer in self._ran or lcb.peer in streams or lcb.segmented
                    or isinstance(lcb.machine, CallLine)
                    or (lcb.routed and not lcb.adverts_out and self.routes.has_news(lcb.peer))):
                continue
            routed_here = streams.get(lcb.peer, [])
            if lcb.must_confirm:
                lcb.must_confirm = False
                lcb.machine.confirm()
            if busy != lcb.busy:  # RECV_LIST full (or the disk): "stored, send nothing more for now"
                lcb.busy = busy
                lcb.machine.set_busy(busy)
            if isinstance(lcb.machine, CallLine):
                self._call(lcb, lcb.machine, routed_here, wall)
            if lcb.state is LineState.UP:
                if lcb.routed and self.routes.learn:
                    self._advertise(lcb)
                active = len(lcb.active)
                self._send_some(lcb, routed_here, fx, wall)
                if len(lcb.active) > active:  # an image for a BSC line held for it goes now, not a pass later
                    self._on_deadline(lcb, self._now)
            self._write(lcb, fx)
            for ev in lcb.machine.events():  # the frames just built are traced in this pass
                if isinstance(ev, FrameTraced):
                    self._trace_frame(lcb, ev, fx)
                else:  # (a timer the machine acted on above): the next pass, at once, takes it
                    lcb.backlog.append((ev, self._now))
                    self._touched.add(lcb.peer)
                    fx.wake_at(self._now)
            lcb.due = _due(lcb)
        for route in self.routes.take_changes():
            fx.trace("line", "route", route.via, None, to=route.dest, source=route.kind,
                     distance=route.dist if route.reachable else None)

    def _call(self, lcb: LineControlBlock, machine: CallLine, routed_here: list[tuple[int, str]], wall: float) -> None:
        """A line that is a call: call when a message waits for it; with a schedule, only in its
        windows (in "connected" mode, all of each window), or for an urgent message (docs/CALLS.md)."""
        window = True
        if lcb.schedule is not None:  # (windows open and close on the minute: a pass then looks again)
            lcb.window_check = self._now + 60.0 - wall % 60.0
            local = datetime.fromtimestamp(wall)
            window = lcb.schedule.open(local)
            machine.keep_up = window and lcb.cfg.schedule_mode == "connected"
            if window:
                lcb.call_window = "open"
            elif not lcb.call_window.startswith("closed"):  # (looked for once a window closes)
                at = lcb.schedule.next_open(local)
                lcb.call_window = f"closed until {at:%a %H:%M}" if at else "closed"
        if machine.connected:
            return
        if machine.keep_up or self._wanted(routed_here, wall, 0 if window else lcb.cfg.urgent_priority):
            machine.call(self._now)

    def _wanted(self, routed_here: list[tuple[int, str]], wall: float, least: int = 0) -> bool:
        """Does a message of priority `least` or more wait in the streams routed over this line that
        it would carry now (as the Message-Sender takes them: not held back, none after one in
        doubt)? Custody's own messages (LOOSE: states, probes) make no call: they go with the next one."""
        for priority, dest in routed_here:
            if priority >= least and any(
                    not (b.flags & LOOSE or self._held_back(b, wall))
                    for b in itertools.takewhile(lambda b: not b.flags & DOUBT, self.lists.send.queue(dest, priority))):
                return True
        return False

    def _held_back(self, blk: MSGBLOK, wall: float) -> bool:
        """Passed over for now, those behind it going: held by the operator, for its name's quota,
        or a void parked for a routing loop."""
        return blk.parked_until > wall or blk.held or self.holds(blk, wall)

    def _advertise(self, lcb: LineControlBlock) -> None:
        """A triggered update: what the peer has not heard yet (the table says what moved), in as
        many messages as it takes; none while the last is unacknowledged, so that what moves
        meanwhile goes in one update (on an idle line at once; on a busy one, changes that
        succeed each other while a network converges are not each sent)."""
        if lcb.adverts_out:
            return
        parts: list[list[str]] = []
        size = self.max_message
        for token in self.routes.news_for(lcb.peer):  # (at most max_message bytes a message, a token at least)
            if size + 1 + len(token) > self.max_message:
                parts.append([])
                size = -1
            parts[-1].append(token)
            size += 1 + len(token)
        for part in parts:
            image = envelope.wrap(lcb.peer + ADVERT_NAME, self.host + ADVERT_NAME, 0, 0, " ".join(part).encode("ascii"),
                                  Envelope(flags=envelope.ADVERT))
            lcb.counters["routing_bytes"] += len(image)  # what routing costs the line (its frames' images)
            lcb.machine.send(image)
            lcb.adverts_out += 1

    def _streams(self) -> dict[str | None, list[tuple[int, str]]]:
        """SEND_LIST's (priority, destination) streams, highest priority first, by the peer of
        the line their next hop is: sorted once a pass, each line's Message-Sender reads its own."""
        by_line: dict[str | None, list[tuple[int, str]]] = collections.defaultdict(list)
        for p, d in self.lists.send.priorities():
            by_line[self.routes.next_hop(d)].append((p, d))
        return by_line

    def _send_some(self, lcb: LineControlBlock, routed_here: list[tuple[int, str]], fx: Effects, wall: float) -> None:
        """The Message-Sender for one line: SEND_LIST's blocks for every destination routed over it
        (`routed_here`: its streams), highest priority first, each (destination, priority) stream in
        order, the destinations of one priority taking turns, while the machine has room and the
        wire is nearly free (on a BSC line one of higher priority may overtake: _overtakes)."""
        self._forgets_first(lcb, fx)
        lcb.next_hand = None
        if not lcb.active:  # every frame handed is acknowledged: its bytes are out (a line faster than its baud)
            lcb.wire_free = min(lcb.wire_free, self._now)
        streams = [(p, d) for p, d in routed_here if lcb.routed or d == lcb.peer]  # version 1: only its own
        if not streams and not lcb.segmented:  # nothing for this line (most lines, most passes)
            return
        room = lcb.machine.room()
        lead = max(LEAD, URGENT_WAIT - lcb.frame_time) if lcb.frame_time else LEAD  # LEAD till a frame shows its length
        # a message this line carries in segments is finished here, even if its route moved meanwhile
        moved = {(b.priority, b.dest) for b in lcb.segmented.values()} - set(streams)
        queues: dict[int, list[Iterator[MSGBLOK]]] = {p: [] for p, _ in sorted([*streams, *moved], reverse=True)}
        for p, d in streams:
            queues[p].append(self._pieces(lcb, d, p, wall))
        for p, d in moved:
            queues[p].append(self._rest(lcb, d, p))
        for priority, turn in queues.items():
            while turn:
                for queue in list(turn):
                    if room <= 0 and not _overtakes(lcb, priority):
                        return
                    # enough ahead of the wire: the rest waits here, unless it passes what the machine holds
                    if lcb.wire_free - self._now > lead and priority <= lcb.handed_priority:
                        _hand_by(lcb, lcb.wire_free - REFILL)
                        return
                    blk = next(queue, None)
                    if blk is None or not self._hand(lcb, blk, fx, wall):
                        turn.remove(queue)  # empty, or held for the peer's maximum: nothing after it goes
                        continue
                    room -= 1

    def _pieces(self, lcb: LineControlBlock, dest: str, priority: int, wall: float) -> Iterator[MSGBLOK]:
        """The blocks for `dest` of one priority this line may hand over, in order; a block in
        segments again for each of its pieces, until its last one is handed."""
        for blk in self.lists.send.queue(dest, priority):
            if not lcb.routed and blk.pseq:  # numbered: it goes only with its number, and none behind it
                return  # may pass it unnumbered (the line signed on as version 1: it waits for a routed one)
            if blk.flags & DOUBT:  # its destination may have it: it, and all after it, wait to know (mccs.core.custody)
                return
            if blk.state is BlockState.IN_FLIGHT and blk.line is None:  # handed whole already: nothing more of it
                continue
            if self._held_back(blk, wall) or self._waits_for_the_line(lcb, blk, wall):
                continue
            if (not blk.pseq and blk.origin == self.host and not blk.flags & LOOSE
                    and self.pairs.out.syncing(dest, priority)):
                continue  # no number before the destination says how far it got (mccs.core.custody)
            if not self.blobs.ready(blk.data):  # its text is committed with this pass: it, and all after it, wait
                return
            if blk.line not in (None, lcb.peer):  # going in segments on the line of an earlier route: it first
                return
            while blk.state is not BlockState.IN_FLIGHT or blk.more_on(lcb.peer):
                yield blk

    def _waits_for_the_line(self, lcb: LineControlBlock, blk: MSGBLOK, wall: float) -> bool:
        """A LOOSE block while the peer holds the line, until LOOSE_BYTES' time after it was stored
        (then a pass comes: next_hand)."""
        if not (blk.flags & LOOSE and lcb.machine.receiving):
            return False
        wait = blk.ts + LOOSE_BYTES * lcb.cfg.char_time() - wall
        if wait <= 0:
            return False
        _hand_by(lcb, self._now + wait)
        return True

    def _rest(self, lcb: LineControlBlock, dest: str, priority: int) -> Iterator[MSGBLOK]:
        """The pieces still to hand of the message for `dest` this line carries in segments."""
        for blk in self.lists.send.queue(dest, priority):
            while blk.more_on(lcb.peer) and not blk.held:
                yield blk

    def _unnumbered_epoch(self, blk: MSGBLOK) -> str:
        """Custody's own messages (LOOSE) carry this host's epoch without a number, which tells the
        destination to take them without its MSG_ID window (mccs.core.receiver)."""
        return self.pairs.epoch if blk.flags & LOOSE else envelope.NO_EPOCH

    def _hand(self, lcb: LineControlBlock, blk: MSGBLOK, fx: Effects, wall: float) -> bool:
        """Hand the machine the block, or its next segment; False if it must wait (too large for the peer)."""
        text, end = blk.data, None
        if blk.line == lcb.peer or (lcb.large and self._too_long(lcb, blk)):
            if blk.size > lcb.large:
                return self._hold(lcb, blk, f"the peer takes messages of at most {lcb.large} bytes (its max_message)")
            if blk.line != lcb.peer and blk.acked and blk.acked_by not in ("", lcb.peer):
                log.info("%s: message %s/%d goes on by %s, not %s which holds %d bytes of it: from its start",
                         self.host, blk.origin, blk.msg_id, lcb.peer, blk.acked_by, blk.acked)
                self._from_the_start(blk, fx)
            segment = self._segment(lcb, blk)
            if segment is None:  # its next piece is read from the checkpoint after this pass
                return False
            text, end = segment
        if isinstance(text, Stored):
            return self._hold(lcb, blk, "the peer does not take large messages (an older MCCS)")
        if lcb.routed:
            if not blk.pseq and blk.origin == self.host and not blk.flags & LOOSE and not blk.hops:  # numbered
                # as it first leaves on a routing line (one that came back round goes on as it was, as custody's
                # own messages, which lose LOOSE on the way, and a protected one, whose tag covers its numbers)
                fx.change(*self.pairs.number(blk), ch.set_pseq(Table.SEND_LIST, blk.seq, blk.pseq, blk.epoch))
            flags = envelope.to_wire(blk.flags) | (envelope.SEGMENT if end is not None else 0)
            env = Envelope(blk.hops, flags, blk.epoch or self._unnumbered_epoch(blk), blk.pseq,
                           envelope.ttl_left(blk.expires, wall), blk.priority)
            protected = self._protect(lcb, blk, text, env, end)
            if isinstance(protected, str):
                return self._hold(lcb, blk, protected, "e2e_held")
            img = envelope.wrap(blk.to_id, blk.from_id, blk.msg_id, blk.user_id, *protected)
        elif blk.seal or self._protects(blk):
            return self._hold(lcb, blk, "the peer speaks version 1, which carries no end-to-end protection", "e2e_held")
        else:
            img = image.encode(blk.to_id, blk.from_id, blk.msg_id, blk.user_id, text)
        try:
            lcb.machine.send(img, blk.priority)
        except ValueError as e:  # over the MAXMSG the peer signed on with: a config to fix
            return self._hold(lcb, blk, str(e))
        if lcb.held is blk:
            lcb.held = None
        lcb.give_up.pop(blk.seq, None)
        lcb.handed_priority = blk.priority
        lcb.frame_time = (len(img) + FRAME_BYTES) * 10 / lcb.cfg.baud
        lcb.wire_free = max(lcb.wire_free, self._now) + lcb.frame_time
        blk.state = BlockState.IN_FLIGHT
        lcb.active.append((blk, end))
        if end is not None:
            if blk.line != lcb.peer:
                blk.line = lcb.peer
                lcb.transfer = Transfer(blk, self._now, blk.acked)
            blk.next_off = end
            if blk.more_on(lcb.peer):
                lcb.segmented[blk.seq] = blk
            else:
                lcb.segmented.pop(blk.seq, None)
        if not blk.sent:
            blk.sent = True
            fx.trace("msg", "sent", lcb.peer, lcb.cfg.protocol, **fields(blk))
        return True

    def _protect(self, lcb: LineControlBlock, blk: MSGBLOK, text: bytes, env: Envelope,
                 end: int | None) -> tuple[bytes, Envelope] | str:
        """The text and envelope as they go end to end: a transit copy's trailer as its origin made
        it, this host's own message signed or sealed (mccs.core.e2e); or why the line cannot take it."""
        if e2e.in_segments(blk.seal) and end is None:
            return "a message protected in segments goes only in segments, which the peer does not take"
        if len(blk.seal) == e2e.PENDING_SIZE:  # this host's own, sealed as a whole at SEND: in segments
            try:
                trailer = e2e.protect_segments(self.keys, blk.seal, e2e.Header.of(blk, env), env.ttl)
            except e2e.Refused as er:
                return str(er)
        elif blk.seal:  # a copy of another origin's (or of one that came back round): as it came
            trailer = blk.seal
        elif not self._protects(blk):
            return text, env
        elif end is not None:  # (_too_long keeps such a message whole)
            return "a message protected whole does not go in segments"
        else:
            try:
                text, trailer = e2e.protect(self.keys, self.e2e_mode, e2e.Header.of(blk, env), env.ttl, bytes(text))
            except e2e.Refused as er:
                return str(er)
        if e2e.FEATURE not in lcb.features:
            return "the peer does not carry messages protected end to end (an older MCCS)"
        return text, dataclasses.replace(env, e2e=trailer)

    def _protects(self, blk: MSGBLOK) -> bool:
        """Does this host sign or seal the block? Its own messages with e2e on, but a void (no text
        left to protect) and a daemon's message to a host it has no key for (a notice must reach it)."""
        return (self.e2e_mode is not e2e.Mode.NONE and blk.origin == self.host and not blk.flags & envelope.VOID
                and (self.keys.trusts(blk.dest) or not is_daemon(blk.from_id)))

    def _from_the_start(self, blk: MSGBLOK, fx: Effects) -> None:
        """A message in segments goes to a next host that holds none of it (another route, or one
        that started afresh): from its first byte. The one that holds its start is owed a forget."""
        held = self.holding.pop(blk.seq, None)
        if held is not None:
            fx.change(*self.forgets.owe(held[1]))
        blk.acked = blk.next_off = 0
        blk.acked_by = ""
        fx.change(ch.delete_acked(blk.seq))

    # -- forgets: a next host that holds part of a message that will not go on there is told so ----
    def _holds(self, blk: MSGBLOK) -> None:
        """blk.acked_by holds the start of the block: it gets a forget unless the block ends there."""
        self.holding[blk.seq] = (blk, Forget(blk.acked_by, blk.from_id, blk.msg_id, blk.to_id, blk.size, blk.crc))

    def _settle(self, fx: Effects) -> None:
        """Blocks that left SEND_LIST (expired, purged, returned, sent whole by another route), became
        voids or lost their progress while a next host held their start: that host is owed a forget,
        stored in this pass."""
        for seq, (blk, forget) in list(self.holding.items()):
            if (blk.acked and blk.acked_by == forget.peer and not blk.flags & envelope.VOID
                    and blk in self.lists.send):
                continue
            del self.holding[seq]
            fx.change(*self.forgets.owe(forget))

    def _forgets_first(self, lcb: LineControlBlock, fx: Effects) -> None:
        """The forgets owed to the peer, handed once a sign-on before any segment: a message sent
        there again goes from its first byte, after its forget. A routing peer that does not take
        them (an older MCCS) keeps what it holds until its ttl, as before: they are not kept."""
        if not lcb.routed:
            return
        if FORGET not in lcb.features:
            fx.change(*self.forgets.drop_peer(lcb.peer))
            return
        for forget in self.forgets.to_hand(lcb.peer, lcb.counters["ups"]):
            lcb.machine.send(forget.image(self.host))
            lcb.counters["forgets_sent"] += 1

    def _daemon_acked(self, lcb: LineControlBlock, img: bytes, fx: Effects) -> None:
        """A forget's acknowledgement ends it; a routing update's lets the next one go."""
        try:
            m, env = envelope.unwrap(img, len(img))
        except image.ImageError:
            return
        if segments.is_forget(env):
            forget = segments.read_forget(lcb.peer, m.data)
            fx.change(*self.forgets.done(lcb.peer, forget.from_id, forget.msg_id))
        elif lcb.adverts_out:
            lcb.adverts_out -= 1

    def _too_long(self, lcb: LineControlBlock, blk: MSGBLOK) -> bool:
        """Does the block go in segments on this line now (it does not fit the frame size in use)?"""
        if e2e.in_segments(blk.seal):
            return True
        if blk.seal or self._protects(blk):  # whole if a frame holds it (mccs.core.machine), whatever the noise:
            return isinstance(blk.data, Stored) or blk.size > min(max(self.max_message, DAEMON_ROOM), lcb.cfg.frame_max)
        return isinstance(blk.data, Stored) or blk.size + segments.SIZE + envelope.SIZE > lcb.machine.segment_size()

    def _segment(self, lcb: LineControlBlock, blk: MSGBLOK) -> tuple[bytes, int] | None:
        """The block's next segment (its text with the trailer), and where it ends; None until its
        piece is read (mccs.core.segments.Blobs)."""
        if not blk.crc and not isinstance(blk.data, Stored):  # in memory: CRC-32 made as it first goes in segments
            blk.crc = segments.crc_of(blk.data)
        trailer = envelope.LARGE_SIZE if e2e.in_segments(blk.seal) else 0
        room = max(1, lcb.machine.segment_size() - segments.SIZE - envelope.SIZE - trailer)
        piece = self.blobs.piece(blk.data, blk.next_off, room)
        if piece is None:
            return None
        return segments.wrap(piece, blk.size, blk.next_off, blk.crc), blk.next_off + len(piece)

    def _hold(self, lcb: LineControlBlock, blk: MSGBLOK, why: str, counter: str = "too_large") -> bool:
        """The block cannot go to this peer: it, and every block after it for the same host, waits."""
        lcb.held = blk
        if blk.seq not in lcb.give_up:
            lcb.give_up[blk.seq] = (blk, self._now + self.too_large_wait)
            lcb.counters[counter] += 1
            log.error("%s: message %s/%d (%d bytes) cannot go to %s: %s. It and every message after it "
                      "wait on SEND_LIST; unless %s takes it within %.0f s (max_message as large at both ends), "
                      "it is returned undeliverable", self.host, blk.origin, blk.msg_id, blk.size, lcb.peer, why,
                      lcb.peer, self.too_large_wait)
        return False

    def deadline(self) -> float | None:
        return min((lcb.due for lcb in self.lcbs.values() if lcb.due is not None), default=None)

    def next_write(self) -> float | None:
        """When a line's paced write is due: bytes of frames built already, no pass needed."""
        return min((at for lcb in self.lcbs.values() if (at := lcb.machine.next_write()) is not None), default=None)

    def write_paced(self, fx: Effects, now: float) -> None:
        """The paced writes due by `now` (Kernel.write_paced)."""
        self._now = now
        for lcb in self.lcbs.values():
            at = lcb.machine.next_write()
            if at is not None and at <= now:
                fx.write(lcb.peer, lcb.machine.paced(now))
                if lcb.machine.next_write() is None:  # all handed: the machine's deadline may be the next frame's
                    lcb.due = _due(lcb)


def _due(lcb: LineControlBlock) -> float | None:
    """When the line needs a pass next, by itself. Only inputs move a machine's deadline, and the
    line's own times move only in passes that run it: kept until then (Lines.send)."""
    times = [t for t in (lcb.machine.next_deadline(), lcb.signon_at, lcb.next_hand, lcb.hold_until,
                         lcb.window_check, *(at for _, at in lcb.give_up.values())) if t is not None]
    return min(times, default=None)


def _overtakes(lcb: LineControlBlock, priority: int) -> bool:
    """A BSC machine takes one image at a time (room()), and that one may wait out a whole turn of
    the line to the peer before its first block: a message of a priority above the last handed goes
    even so, before it (BscLine.send). An async machine holds a window's worth, and frame abort
    cuts in for an urgent one."""
    return lcb.cfg.protocol == "bsc" and priority > lcb.handed_priority and bool(lcb.active)


def _hand_by(lcb: LineControlBlock, at: float) -> None:
    """The Message-Sender's next pass for the line comes by `at`."""
    lcb.next_hand = at if lcb.next_hand is None else min(lcb.next_hand, at)


def _frame_time(lcb: LineControlBlock) -> float:
    """A little more than the last message frame's time on the wire."""
    return 1.25 * lcb.last_frame * lcb.cfg.char_time()


def _streaming(lcb: LineControlBlock, now: float) -> bool:
    """Did the last message come about one frame time ago or less: is the peer sending back to back?"""
    return lcb.last_arrival is not None and now - lcb.last_arrival <= _frame_time(lcb)
