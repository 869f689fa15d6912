"""The lines of one daemon: a Line Control Block per `[[line]]`, the Message-Receiver and the
Message-Sender (paper, Figure 2).

Bytes from a port arrive on the port's reader thread and are handed to the loop; the state
machine is only ever touched on the loop thread. The Message-Receiver runs inside the pass's
transaction: an arrived message goes on RECV_LIST with its duplicate-window key, an
acknowledgement deletes its MSGBLOK from SEND_LIST; the machine is told to acknowledge
(`confirm()`) only after the commit. The Message-Sender runs after the commit and hands
durable MSGBLOKs, in order, to lines that are UP and have room; a line that goes DOWN gives its
MSGBLOKs back (they never left SEND_LIST) and signs on again after a back-off.
"""
from __future__ import annotations

import collections
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from linedrivers import (FrameTraced, LineDown, LineEvent, LineUp, MessageAcked, MessageReceived,
                         PeerRefused, image)
from linedrivers.port import SerialPort

from .config import LineConfig
from .lists import MSGBLOK

log = logging.getLogger("mccs.lines")

BACKOFF_MIN = 0.5
DOWN, SIGNING_ON, UP = "DOWN", "SIGNING_ON", "UP"


def make_machine(host: str, lc: LineConfig, max_message: int):
    """The protocol's sans-I/O state machine with every timer and limit from the config."""
    common = dict(baud=lc.baud, max_message=max_message, reply_timeout=lc.reply_timeout, retry_limit=lc.retry_limit)
    if lc.protocol == "async":
        from linedrivers import AsyncLine
        return AsyncLine(host, lc.peer, window=lc.window, xonxoff_safe=lc.xonxoff_safe, keepalive=lc.keepalive,
                         **common)
    from linedrivers import BscLine
    return BscLine(host, lc.peer, role=lc.role, code=lc.code, block_size=lc.block_size,
                   disconnect_timeout=lc.disconnect_timeout, ttd_timeout=lc.ttd_timeout, **common)


@dataclass(eq=False)
class LineControlBlock:
    cfg: LineConfig
    machine: Any
    port: SerialPort | None = None
    state: str = DOWN
    active: collections.deque = field(default_factory=collections.deque)  # MSGBLOKs handed to the machine
    must_confirm: bool = False  # messages received this pass: acknowledge after the commit
    busy: bool = False
    backoff: float = BACKOFF_MIN
    signon_at: float | None = None  # when to sign on again
    port_open: bool = False
    last_down: str = ""
    held: MSGBLOK | None = None  # the first MSGBLOK the peer's maximum refuses: waits, and all after it
    counters: collections.Counter = field(default_factory=collections.Counter)

    @property
    def peer(self) -> str:
        return self.cfg.peer

    def status(self) -> dict:
        machine = getattr(self.machine, "counters", {})
        return {"peer": self.peer, "protocol": self.cfg.protocol, "state": self.state, "port": self.cfg.port,
                "port_open": self.port_open, "baud": self.cfg.baud, "active": len(self.active),
                "last_down": self.last_down, "counters": {**machine, **self.counters},
                "held": f"{self.held.origin}/{self.held.msg_id}, {len(self.held.data)} bytes" if self.held else None}


class Lines:
    def __init__(self, daemon):
        self.d = daemon
        self.lcbs: dict[str, LineControlBlock] = {}
        self._drop_every = int(os.environ.get("MCCS_FAULT_DROP_RECEIVED", "0"))  # test hook, see loopback

    # -- life -----------------------------------------------------------------------------
    def start(self) -> None:
        d = self.d
        for lc in d.cfg.lines:
            lcb = LineControlBlock(lc, make_machine(d.host, lc, d.cfg.max_message))
            lcb.port = SerialPort(lc.port, baudrate=lc.baud, bytesize=lc.bytesize, parity=lc.parity,
                                  stopbits=lc.stopbits, rtscts=lc.rtscts, xonxoff=lc.xonxoff,
                                  on_data=lambda data, now, lcb=lcb: d.loop.call_soon_threadsafe(self._data, lcb, data, now),
                                  on_state=lambda up, why, lcb=lcb: d.loop.call_soon_threadsafe(self._port_state, lcb, up, why),
                                  backoff_max=lc.backoff_max)
            self.lcbs[lc.peer] = lcb
            lcb.port.start()

    def stop(self) -> None:
        """Sign off every line that is up, give the bytes a moment to leave, close the ports."""
        now = time.monotonic()
        for lcb in self.lcbs.values():
            if lcb.state != DOWN:
                lcb.machine.stop(now)
                lcb.port.write(lcb.machine.data_to_send())
        if any(lcb.state != DOWN for lcb in self.lcbs.values()):
            time.sleep(0.2)
        for lcb in self.lcbs.values():
            lcb.port.close()

    def status(self) -> list[dict]:
        return [lcb.status() for lcb in self.lcbs.values()]

    # -- from the port threads (run on the loop) ---------------------------------------------
    def _data(self, lcb: LineControlBlock, data: bytes, now: float) -> None:
        lcb.machine.receive_data(data, now)
        self.d.wake()

    def _port_state(self, lcb: LineControlBlock, is_open: bool, why: str) -> None:
        lcb.port_open = is_open
        now = time.monotonic()
        if is_open:
            self._sign_on(lcb, now)
        else:  # the port is gone (cable, adapter, pty): a fresh machine when it is back
            self._down(lcb, f"port lost: {why}")
            lcb.machine = make_machine(self.d.host, lcb.cfg, self.d.cfg.max_message)
            lcb.busy = False  # the fresh machine is not busy: told again after the next commit
            lcb.signon_at = None
        self.d.wake()

    def _sign_on(self, lcb: LineControlBlock, now: float) -> None:
        lcb.signon_at = None
        if lcb.state == DOWN:
            lcb.state = SIGNING_ON
        lcb.machine.start(now)

    def _down(self, lcb: LineControlBlock, reason: str) -> None:
        """Every MSGBLOK the line held goes back to waiting, in order; they never left SEND_LIST."""
        was = lcb.state
        for blk in lcb.active:
            blk.active = False
        lcb.active.clear()
        lcb.must_confirm = False
        lcb.state, lcb.last_down = DOWN, reason
        if was == UP:
            self.d.trace.line("down", lcb.peer, lcb.cfg.protocol, reason=reason)
            log.warning("%s: line to %s down: %s", self.d.host, lcb.peer, reason)
        if lcb.port_open:
            lcb.signon_at = time.monotonic() + lcb.backoff
            lcb.backoff = min(lcb.backoff * 2, lcb.cfg.backoff_max)

    # -- in the pass, inside the transaction: the Message-Receiver -------------------------
    def receive(self, now: float) -> None:
        for lcb in self.lcbs.values():
            if lcb.signon_at is not None and now >= lcb.signon_at:
                self._sign_on(lcb, now)
            deadline = lcb.machine.next_deadline()
            if deadline is not None and now >= deadline:
                lcb.machine.handle_timeout(now)
            for ev in lcb.machine.events():
                self._event(lcb, ev)

    def _event(self, lcb: LineControlBlock, ev) -> None:
        d, proto = self.d, lcb.cfg.protocol
        if isinstance(ev, FrameTraced):
            d.trace.frame(lcb.peer, proto, ev)
        elif isinstance(ev, MessageReceived):
            self._received(lcb, ev.image)
        elif isinstance(ev, MessageAcked):
            self._acked(lcb, ev.image)
        elif isinstance(ev, LineUp):
            lcb.state, lcb.backoff = UP, BACKOFF_MIN
            lcb.counters["ups"] += 1
            d.trace.line("up", lcb.peer, proto, baud=lcb.cfg.baud)
            log.info("%s: line to %s up (%s)", d.host, lcb.peer, proto)
        elif isinstance(ev, LineDown):
            if ev.reason == "refused":
                d.trace.line("signon_refused", lcb.peer, proto, reason="refused by the peer")
            self._down(lcb, ev.reason)
        elif isinstance(ev, PeerRefused):
            lcb.counters["refused"] += 1
            d.trace.line("signon_refused", lcb.peer, proto, reason=f"sign-on from {ev.peer!r}, not {lcb.peer!r}")
            log.warning("%s: refused a sign-on from %r on the line to %s", d.host, ev.peer, lcb.peer)
        elif isinstance(ev, LineEvent):
            d.trace.line(ev.kind, lcb.peer, proto, reason=ev.detail or None)

    def _received(self, lcb: LineControlBlock, img: bytes) -> None:
        d = self.d
        lcb.must_confirm = True  # whatever happens below, the peer must stop sending it
        try:
            m = image.decode(img, d.cfg.max_message)
        except image.ImageError as e:
            lcb.counters["bad_images"] += 1
            log.warning("%s: dropped a bad message image from %s: %s", d.host, lcb.peer, e)
            return
        if m.to_id[:2] != d.host:
            lcb.counters["misrouted"] += 1
            log.warning("%s: dropped a message for %s from %s: not for this host", d.host, m.to_id, lcb.peer)
            return
        if d.cp.is_duplicate(m.origin, m.msg_id):
            lcb.counters["duplicates"] += 1
            d.trace.msg("duplicate", line=lcb.peer, proto=lcb.cfg.protocol, origin=m.origin, msg_id=m.msg_id,
                        from_id=m.from_id, to_id=m.to_id, user_id=m.user_id)
            return
        d.cp.add_dup_key(m.origin, m.msg_id)
        lcb.counters["received"] += 1
        if self._drop_every and lcb.counters["received"] % self._drop_every == 0:
            log.error("%s: MCCS_FAULT_DROP_RECEIVED: dropping %s/%d on purpose", d.host, m.origin, m.msg_id)
            return
        blk = MSGBLOK(d.cp.next_seq(), m.to_id, m.from_id, m.msg_id, m.user_id, m.data, time.time())
        d.lists.recv.add(blk)
        d.cp.add("recv_list", blk.row())
        d.committed(blk)
        d.after_commit_trace("received", blk, line=lcb.peer, proto=lcb.cfg.protocol)
        d.counters["received"] += 1

    def _acked(self, lcb: LineControlBlock, img: bytes) -> None:
        d = self.d
        origin, msg_id = image.key_of(img)
        blk = d.lists.send.by_msg_id.get(msg_id)
        if origin != d.host or blk is None or not blk.active:
            lcb.counters["stray_acks"] += 1
            return
        if blk in lcb.active:
            lcb.active.remove(blk)
        d.lists.send.remove(blk)
        d.cp.delete("send_list", blk.seq)
        d.after_commit_trace("acked", blk, line=lcb.peer, proto=lcb.cfg.protocol)
        d.counters["acked"] += 1

    # -- after the commit: acknowledgements, the Message-Sender, bytes out ------------------
    def after_commit(self, now: float) -> None:
        d = self.d
        full = len(d.lists.recv) >= d.cfg.buffers
        for lcb in self.lcbs.values():
            if lcb.must_confirm:
                lcb.must_confirm = False
                lcb.machine.confirm()
            if full != lcb.busy:  # RECV_LIST full: "stored, send nothing more for now"
                lcb.busy = full
                lcb.machine.set_busy(full)
            if lcb.state == UP:
                self._send_some(lcb)
            out = lcb.machine.data_to_send()
            if out:
                lcb.port.write(out)
                d.wake()  # one more pass traces the frames that went out

    def _send_some(self, lcb: LineControlBlock) -> None:
        """The Message-Sender for one line: durable MSGBLOKs, in SEND_LIST order, while it has room."""
        room = lcb.machine.room()
        if room <= 0:
            return
        for blk in self.d.lists.send.of(lcb.peer):
            if room <= 0:
                break
            if blk.active or not blk.durable:
                continue
            img = image.encode(blk.to_id, blk.from_id, blk.msg_id, blk.user_id, blk.data)
            try:
                lcb.machine.send(img)
            except ValueError as e:  # over the MAXMSG the peer signed on with: a config to fix
                if lcb.held is not blk:
                    lcb.held = blk
                    lcb.counters["too_large"] += 1
                    log.error("%s: message %s/%d (%d bytes) cannot go to %s: %s. It and every message after it "
                              "wait on SEND_LIST until max_message is the same at both ends", self.d.host,
                              blk.origin, blk.msg_id, len(blk.data), lcb.peer, e)
                return  # keep order: nothing after it overtakes it
            lcb.held = None
            blk.active = True
            lcb.active.append(blk)
            room -= 1
            if not blk.sent:
                blk.sent = True
                self.d.trace.msg("sent", line=lcb.peer, proto=lcb.cfg.protocol, origin=blk.origin,
                                 msg_id=blk.msg_id, from_id=blk.from_id, to_id=blk.to_id, user_id=blk.user_id)

    def deadlines(self) -> list[float]:
        out = []
        for lcb in self.lcbs.values():
            deadline = lcb.machine.next_deadline()
            if deadline is not None:
                out.append(deadline)
            if lcb.signon_at is not None:
                out.append(lcb.signon_at)
        return out
