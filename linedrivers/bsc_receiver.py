"""The receiving side of a BSC station (docs/DESIGN.md 4.2): answering bids and blocks, assembling
messages, and staying in receive state until EOT, DLE EOT or the disconnect timeout, so that an
ENQ asking to repeat an answer is never taken for a bid. A part of BscLine (a mixin).
"""
from __future__ import annotations

from .bsc_base import BscBase
from .bsc_reader import Seq
from .bsc_states import State
from .events import MessageReceived
from .image import HEADER_SIZE

ACK = ("ACK0", "ACK1")
#: A receiver with messages of its own answers RVI once it has taken this many blocks in
#: one transmission, so two busy hosts take turns without a bid per message.
RVI_AFTER = 8


class BscReceiver(BscBase):
    """Receive state; its answers go out through the machine's _tx."""

    def _reset_receiver(self) -> None:
        self._due = 1            # the ACK the next good block earns
        self._last_reply = "ACK0"
        self._assembly = bytearray()   # ETB blocks of the message coming in
        self._reply_waits = False      # the last block's answer waits for confirm()
        self._wack_ack: str | None = None  # after WACK: the ACK to give when no longer busy
        self._rx_blocks = 0
        self._rx_parts = 0             # ETB blocks in _assembly
        self._rvi_sent = False
        self._block_reply: str | None = None  # the answer _last_block earned in this transmission

    def _answer_bid(self) -> None:
        if self._busy:
            self.counters["wacks"] += 1
            self._tx("WACK")
        else:
            self._holdoff = 0.0  # the peer that asked for the line by RVI has taken it: ours when it ends
            self._enter_receive("ACK0")

    def _enter_receive(self, reply: str) -> None:
        self._state = State.RECV
        self._reset_receiver()
        self._reply(reply)

    def _end_receive(self) -> None:
        self._keep_partial()  # a drop seen first as the disconnect timeout: a new sign-on may resume
        self._state = State.CONTROL
        self._reset_receiver()

    def _reply(self, kind: str) -> None:
        self._tx(kind)
        self._last_reply = kind

    def _on_receiving(self, s: Seq) -> None:
        kind = s.kind
        if kind == "ENQ":
            self._repeat_reply()
        elif kind in ("ETB", "ETX"):
            if self._reply_waits:
                return  # the sender must wait for our answer; it comes with confirm()
            if s.ok and self._hs is not None:
                self._proof_in(s)
            elif s.ok and self._agreeing is not None:
                self._pending_block(s)
            elif s.ok:
                self._on_block(s)
            else:
                self._reply("NAK")
        elif kind == "TTD":
            self._tx("NAK")
        elif kind == "EOT":
            if self._agreeing is not None and self._hs is None:
                self._up()  # the bidder heard no announcement
            self._end_receive()

    def _repeat_reply(self) -> None:
        """Answer ENQ: the last reply again (nothing while an answer waits for confirm())."""
        if self._reply_waits:
            return
        if self._wack_ack:
            if self._busy:
                self.counters["wacks"] += 1
                self._tx("WACK")
            else:
                self._reply(self._wack_ack)
                self._wack_ack = None
        else:
            self._tx(self._last_reply)

    def _on_block(self, s: Seq) -> None:
        """Take a good block. The same block again means the sender missed our answer (the
        sender never sends two equal blocks running, see CodeSet.texts): answer, don't keep."""
        text = s.data
        last = self._last_block
        if last is not None and last.kind == s.kind and last.data == text:
            if self._block_reply:  # in this transmission: the answer it earned, whatever was said
                self.counters["duplicates"] += 1  # since; a stray that can only be a wrong ACK
                self._tx(self._block_reply)
                return
            if s.kind == "ETX" and not self._assembly:  # a message sent again in a new transmission
                self.counters["duplicates"] += 1
                if self._unconfirmed:
                    self._reply_waits = True
                else:
                    self._answer_block(final=True)
                return
        self._wack_ack = None
        self._rx_blocks += 1
        if not self._assembly:
            self._resume_held(s)
        if len(self._assembly) + len(text) > self.max_image:
            self.counters["bad_messages"] += 1
            self._assembly.clear()
            self._rx_parts = 0
            self._reply("NAK")
        elif s.kind == "ETB":
            self._assembly += text
            self._rx_parts += 1
            self._last_block = s
            self._answer_block(final=False)
        else:
            image = bytes(self._assembly) + text if self._assembly else text
            self._assembly.clear()
            self._rx_parts = 0
            if len(image) < HEADER_SIZE or int.from_bytes(image[16:18], "big") != len(image) - HEADER_SIZE:
                self.counters["bad_messages"] += 1  # blocks lost or doubled: have it sent again
                self._reply("NAK")
                return
            self._last_block = s
            self._unconfirmed = self._reply_waits = True
            self._events.append(MessageReceived(image))

    def _answer_block(self, final: bool) -> None:
        ack = ACK[self._due]
        self._due ^= 1
        if final and self._busy:
            self.counters["wacks"] += 1
            self._reply("WACK")
            self._wack_ack = ack
        elif final and self._queue and not self._rvi_sent and self._rx_blocks >= RVI_AFTER:
            self.counters["rvis"] += 1
            self._rvi_sent = self._peer_waits = True  # our transmission after it holds only HANDOVER
            self._reply("RVI")
        else:
            self._reply(ack)
        self._block_reply = "RVI" if self._last_reply == "RVI" else ack
