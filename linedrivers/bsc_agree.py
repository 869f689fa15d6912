"""Feature agreement and block-level resume on a BSC line (docs/PROTOCOL.md, "BSC: features and
large messages"). A part of BscLine (a mixin).

A station that offers features sends an announcement (CodeSet.announcement: `SOH text ETX BCC`)
right before its ID ENQ, and the answering station, only when one came right before the ID ENQ,
its own right before its ID ACK0. A version-1 station drops the announcement as a bad sequence
and signs on as docs/DESIGN.md 4.2 says; a station that heard none signs on as version 1 too.
Either announcement can be lost to noise while the ID behind it arrives, so neither end may take
the agreement from the announcements alone: the bidder, having heard the answer, sends a commit
block (a text too short to be an image, with a digest of both announcements) as the first block
of its transmission, with a secret after the proof block and sealed like every block. The
answering station reports LineUp with the features when that block comes with the right digest,
and without them when anything else comes first (a message block or EOT: the bidder heard no
announcement); the bidder reports it when the commit is acknowledged. So both ends agree, and
the digest under the MAC binds the unauthenticated announcements to the authenticated session.

Resume: at a LineDown the receiver keeps the ETB blocks of the image it was assembling and the
sender the image and how many of its blocks were acknowledged. The receiver's next announcement
says what it holds (`HOLD=origin,msg_id,blocks`); when the sender later starts that same image
(the same bytes) it begins at the block after those, unless that block reads like the first
block of an image (starts_image), which is how the receiver tells a resumed block from a new
image: a first block always reads so.
"""
from __future__ import annotations

import hashlib

from .bsc_base import BscBase
from .bsc_reader import Seq
from .events import LineUp, PeerRefused
from .ids import IdError, check_epoch
from .image import HEADER_SIZE, key_of

#: The text of the commit block starts so (a NUL: no image starts with it, a TO_ID is printable).
COMMIT_MAGIC = b"\x00FEAT"
ALTERED = "feature announcements altered on the line"


def starts_image(text: bytes, last: bool) -> bool:
    """Could this block text be the first block of an image: TO_ID and FROM_ID printable ASCII (as
    every process id is) and a LENGTH that fits the block? Random bytes pass one time in 150,000."""
    if len(text) < HEADER_SIZE or not all(0x20 <= c <= 0x7E for c in text[:12]):
        return False
    size = HEADER_SIZE + int.from_bytes(text[16:18], "big")
    return size == len(text) if last else size > len(text)


def parse(text: bytes, codec: str) -> dict[str, str]:
    """The `KEY=value` tokens of an announcement in the line's code."""
    return dict(t.split("=", 1) for t in text.decode(codec, "replace").split() if "=" in t)


def _int(fields: dict, key: str) -> int:
    value = fields.get(key, "0")
    return int(value) if value.isdigit() else 0


def _epoch(fields: dict) -> str:
    """The peer's EPOCH=, "" when it sent none or one that is not 1 to 16 hex digits."""
    try:
        return check_epoch(fields.get("EPOCH", ""))
    except IdError:
        return ""


class BscAgreement(BscBase):
    """Announcements, the commit block and resume; the state is set up in BscLine.__init__."""
    #: This host's checkpoint epoch, announced as EPOCH= (set by the owner; "" announces none).
    epoch: str = ""

    # --- announcements --------------------------------------------------------------------
    def _announcement(self) -> bytes:
        """Our announcement for this sign-on (also what the digest covers)."""
        text = f"FEAT={','.join(sorted(self.features))} LARGE={self.large} MAXMSG={self.max_image - HEADER_SIZE}"
        text += f" EPOCH={self.epoch}" if self.epoch else ""
        if self._held is not None:
            (origin, msg_id), blocks = key_of(self._held[0]), self._held[1]
            text += f" HOLD={origin},{msg_id},{blocks}"
        self._said = text.encode(self.cs.codec)
        return self.cs.announcement(self._said)

    def _announce(self) -> None:
        """Before our ID ENQ, when we offer features."""
        if self.offers:
            self._tx("FEAT", self._announcement())

    def _answer_announcement(self, heard: bytes | None) -> None:
        """Answering an ID ENQ: our announcement goes before the ID ACK0 when one came before the
        ID ENQ, and the agreement waits for the bidder's commit block."""
        self._agreeing = heard if self.offers else None
        if self._agreeing is not None:
            self._tx("FEAT", self._announcement())

    def _digest(self, bidder: bool) -> bytes:
        ours, theirs = self._said, self._agreeing
        assert theirs is not None  # a commit block is made or checked only while agreeing
        return COMMIT_MAGIC + hashlib.sha256(b"\n".join((ours, theirs) if bidder else (theirs, ours))).digest()[:8]

    # --- coming UP ------------------------------------------------------------------------
    def _go(self, now: float, parity: int) -> None:
        """The bidder is signed on (and proven): commit the agreement, or UP as version 1."""
        if self._agreeing is None:
            self._up()
            self._begin_transmission(now, parity)
        else:
            self._send_hello(now, self._digest(bidder=True), parity, "FEAT")

    def _committed(self, now: float) -> None:
        """The bidder: the commit block was acknowledged."""
        parity = self._parity ^ 1
        self._up(agreed=True)
        self._begin_transmission(now, parity)

    def _answering_up(self) -> None:
        """The answering station is signed on (and the bidder proven): UP, unless the bidder's
        commit block is still to come."""
        if self._agreeing is None:
            self._up()

    def _pending_block(self, s: Seq) -> None:
        """A good block while waiting for the commit: the commit, or the bidder heard no
        announcement and this is its first message."""
        if s.kind == "ETX" and s.data.startswith(COMMIT_MAGIC):
            if s.data != self._digest(bidder=False):
                self._tx("DISC")
                self._events.append(PeerRefused(self.peer, ALTERED))
                self._down(ALTERED)
                return
            self._up(agreed=True)
            self._last_block = s
            self._answer_block(final=False)
        else:
            self._up()
            self._on_block(s)

    def _agreement(self) -> LineUp:
        """The LineUp of an agreed sign-on; the sender's resume point and the image limit follow."""
        assert self._agreeing is not None  # _up(agreed=True) comes only with the commit block of an agreement
        mine, theirs = parse(self._said, self.cs.codec), parse(self._agreeing, self.cs.codec)
        self._agreeing = None
        common = set(mine["FEAT"].split(",")) & set(theirs.get("FEAT", "").split(",")) - {""}
        large = min(self.large, _int(theirs, "LARGE")) if _int(theirs, "LARGE") else 0
        if _int(theirs, "MAXMSG"):
            self._limit = min(self.max_image, HEADER_SIZE + _int(theirs, "MAXMSG"))
        self._resume = self._resume_point(theirs.get("HOLD", ""))
        self._agreed = True
        return LineUp(self.peer, frozenset(common), large, _epoch(theirs))

    # --- resume ---------------------------------------------------------------------------
    def _keep_partial(self) -> None:
        """At LineDown, or the end of receive state: what a new sign-on may resume."""
        if self._frames is not None and self._block:
            self._resume = (self._queue[0], self._block)
        if self._assembly:
            self._held = (bytes(self._assembly), self._rx_parts)

    def _resume_point(self, hold: str) -> tuple[bytes, int] | None:
        """The image we were sending and where to go on, if the peer holds its first blocks: as
        many as it acknowledged, or one more (its answer to that one was lost)."""
        if self._resume is None:
            return None
        image, acked = self._resume
        origin, _, rest = hold.partition(",")
        msg_id, _, blocks = rest.partition(",")
        if not (msg_id.isdigit() and blocks.isdigit()) or key_of(image) != (origin, int(msg_id)):
            return None
        return (image, int(blocks)) if acked <= int(blocks) <= acked + 1 else None

    def _first_block(self, frames: list[tuple[bytes, bool]]) -> int:
        """Where the head image starts: after the blocks the peer holds, if it is the one to resume."""
        if self._resume is None or self._resume[0] != self._queue[0]:
            return 0
        n = self._resume[1]
        self._resume = None
        if n >= len(frames) or starts_image(*frames[n]):
            return 0
        self.counters["resumed_blocks"] += n
        return n

    def _resume_held(self, s: Seq) -> None:
        """The first block of an image arrives: a resumed one goes on from the blocks we hold; a new
        copy of that image makes them useless."""
        if self._held is None or not self._agreed:
            return
        if starts_image(s.data, s.kind == "ETX"):
            if key_of(s.data) == key_of(self._held[0]):
                self._held = None
        else:
            self._assembly[:], self._rx_parts = self._held
            self._held = None
