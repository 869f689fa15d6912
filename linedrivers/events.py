"""Events a line state machine reports (docs/DESIGN.md section 4.0), oldest first."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LineUp:
    peer: str
    features: frozenset[str] = frozenset()  # offered by both ends at sign-on (docs/PROTOCOL.md)
    large: int = 0  # the largest whole message both ends take in segments (LARGE=, the smaller); 0: none
    epoch: str = ""  # the peer's checkpoint epoch (EPOCH=, docs/PROTOCOL.md); "": it sent none


@dataclass
class LineDown:
    reason: str
    unacked: list[bytes] = field(default_factory=list)  # every image still held, sent or queued, in order


@dataclass
class MessageReceived:
    image: bytes


@dataclass
class MessageAcked:
    image: bytes


@dataclass
class PeerRefused:
    peer: str  # the id the refusing side met
    reason: str = ""  # why, when not a wrong peer: e.g. failed authentication


@dataclass
class FrameTraced:
    dir: str  # "tx" or "rx"
    kind: str  # async: D A N B S T O P V; BSC: ENQ ACK0 ACK1 NAK WACK RVI TTD EOT DISC ETB ETX ID AUTH
    nbytes: int
    ok: bool = True
    seq: int | None = None
    origin: str | None = None
    msg_id: int | None = None
    retransmit: bool = False
    count: int = 1  # frames this event stands for: damaged ones in a row, merged by the daemon


@dataclass
class LineEvent:
    kind: str  # "timeout" or "retry"
    detail: str = ""


Event = LineUp | LineDown | MessageReceived | MessageAcked | PeerRefused | FrameTraced | LineEvent
