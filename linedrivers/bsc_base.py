"""What the parts of a BSC station (BscLine's mixins) share, declared once for the type checker.

Each part uses state and methods another part or BscLine defines; declared here, they are typed
where they are used. Nothing here runs: the class holds annotations only (BscLine.__init__ and
the parts' resets set the fields and say what each is), and the methods are declared only while
type checking, so every call still goes to the part named beside it.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from .auth import FrameAuth, Handshake
from .bsc_codes import CodeSet
from .bsc_reader import Seq
from .bsc_states import Phase, State
from .events import Event


class BscBase:
    """The state BscLine.__init__ sets up, and what the parts' resets set."""
    # BscLine.__init__: settings
    local: str
    peer: str
    primary: bool
    cs: CodeSet
    random_bytes: Callable[[int], bytes]
    block_size: int
    retry_limit: int
    max_image: int
    reply_timeout: float
    pause: float
    ttd_timeout: float
    counters: dict[str, int]
    secret: bytes | None
    features: frozenset[str]
    large: int
    offers: bool
    # BscLine.__init__: state
    _agreeing: bytes | None
    _said: bytes
    _agreed: bool
    _limit: int
    _held: tuple[bytes, int] | None
    _resume: tuple[bytes, int] | None
    _hello: tuple[bytes, str]
    _seq: dict[str, bytes]
    _hs: Handshake | None
    _auth: FrameAuth | None
    _events: list[Event]
    _state: State
    _busy: bool
    _queue: deque[bytes]
    _priority: deque[int]
    _unconfirmed: bool
    _last_block: Seq | None
    _suspect: tuple[str, str] | None
    # BscSender._reset_sender
    _phase: Phase | None
    _deadline: float | None
    _retries: int
    _frames: list[tuple[bytes, bool]] | None
    _block: int
    _parity: int
    _holdoff: float
    _peer_waits: bool
    # BscReceiver._reset_receiver
    _assembly: bytearray
    _rx_parts: int
    _last_reply: str
    _reply_waits: bool

    if TYPE_CHECKING:
        # BscLine
        def _tx(self, kind: str, frame: bytes | None = None, *, trace: str | None = None,
                image: bytes | None = None, retransmit: bool = False) -> int: ...
        def _timeout(self, detail: str) -> None: ...
        def _retry(self, detail: str) -> bool: ...
        def _expect_reply(self, now: float, sent: int) -> None: ...
        def _up(self, agreed: bool = False) -> None: ...
        def _down(self, reason: str) -> None: ...

        # BscSignOn
        def _signon_overdue(self, now: float) -> None: ...
        def _seal(self, content: bytes) -> bytes: ...
        def _send_hello(self, now: float, text: bytes, parity: int, trace: str) -> None: ...
        def _proof_in(self, s: Seq) -> None: ...

        # BscAgreement
        def _announce(self) -> None: ...
        def _answer_announcement(self, heard: bytes | None) -> None: ...
        def _go(self, now: float, parity: int) -> None: ...
        def _committed(self, now: float) -> None: ...
        def _answering_up(self) -> None: ...
        def _pending_block(self, s: Seq) -> None: ...
        def _keep_partial(self) -> None: ...
        def _first_block(self, frames: list[tuple[bytes, bool]]) -> int: ...
        def _resume_held(self, s: Seq) -> None: ...

        # BscSender
        def _reset_sender(self) -> None: ...
        def _begin_transmission(self, now: float, parity: int = 1) -> None: ...

        # BscReceiver
        def _answer_bid(self) -> None: ...
        def _enter_receive(self, reply: str) -> None: ...
        def _on_block(self, s: Seq) -> None: ...
        def _answer_block(self, final: bool) -> None: ...
