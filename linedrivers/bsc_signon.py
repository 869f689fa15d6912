"""Signing on a BSC line: the identification exchange (ID ENQ / ID ACK0 / ID NAK, docs/DESIGN.md
4.2) and, with a secret, authentication (docs/PROTOCOL.md). A part of BscLine (a mixin).

With a secret the IDs carry AUTH_MARK and the answering station's ID ACK0 its nonce; the bidder
then sends, in phase AUTH of XMIT, a proof block (its nonce and proof) that the answering
station, still signing on in RECV, checks before it answers ACK1 and reports LineUp; the
bidder's LineUp comes with that ACK1, whose MAC proves the answering station. From then on every
block and control sequence carries a trailer (counter and MAC) that must pass. Before a session
key exists only NAK and DISC go without one (UNSIGNED), and are believed only while signing on.
"""
from __future__ import annotations

from .auth import AUTH_FAILED, INITIATOR, NONCE_SIZE, PROOF_SIZE, UNSIGNED, Handshake, new_nonce
from .bsc_base import BscBase
from .bsc_reader import Seq
from .bsc_states import UP_STATES, Phase, State
from .events import LineEvent, PeerRefused

#: The text of the proof block starts so; then the bidder's nonce and its proof.
PROOF_MAGIC = b"AUTH"


class BscSignOn(BscBase):
    """Identification and authentication; the session keys are self._auth, a sign-on under
    way with a secret self._hs."""

    def _send_id_enq(self, now: float) -> None:
        self._announce()
        self._expect_reply(now, self._tx("ID_ENQ"))

    def _signon_overdue(self, now: float) -> None:
        self._timeout("no answer to ID ENQ")
        self._retries += 1
        if self._retries > self.retry_limit:
            self._down("no answer")
        else:
            self._events.append(LineEvent("retry", "ID ENQ again"))
            self._send_id_enq(now)

    def _refuse(self, kind: str, who: str, why: str, down: str) -> None:
        """Refuse the ID `who` met in an ID ENQ (ID NAK) or in the ID ACK0 to our sign-on (DISC,
        and DOWN with `down`), but only when the same ID comes twice running for the same reason:
        IDs carry no BCC, and one bit error must not read as a stranger."""
        if (who, why) != self._suspect:
            self._suspect = (who, why)
            self.counters["bad_ids"] += 1
            return
        self._suspect = None
        self._events.append(PeerRefused(who, why))
        if kind == "ID_ENQ":
            self._tx("ID_NAK")
        elif self._state is State.SIGNON:
            self._tx("DISC")
            self._down(down)

    def _on_id(self, s: Seq, now: float, heard: bytes | None) -> None:
        """`heard`: the announcement that came right before the ID (bsc_agree)."""
        st = self._state
        if s.kind == "ID_NAK":  # the peer does not know us, whatever ID it gives
            if st is State.SIGNON:
                self._down("refused")
            return
        who, authenticates, nonce = self.cs.parse_id(s.data)
        if who != self.peer:
            self._refuse(s.kind, who, "", "wrong peer")
            return
        if authenticates != (self.secret is not None):
            if self.secret is not None:
                self._refuse(s.kind, who, "signed on without authentication, but this line has a secret",
                             "no authentication")
            else:
                self._refuse(s.kind, who, "asks for authentication, but this line has no secret", "no secret")
            return
        self._suspect = None
        if s.kind == "ID_ACK0":
            if st is State.SIGNON:
                self._agreeing = heard if self.offers else None
            if st is State.SIGNON and self.secret is not None:
                self._prove(nonce, now)
            elif st is State.SIGNON:
                self._go(now, 1)
            elif st is State.BID and self.secret is None:
                self._begin_transmission(now)  # the ID ACK0 repeated for our bid
        elif st is State.SIGNON and self.primary:
            self.counters["collisions"] += 1  # both signing on: ours wins
        elif st is State.RECV and self._last_reply == "ID_ACK0":
            if self._agreeing is not None:  # our ID ACK0 was lost: repeat it, with our announcement
                self._answer_announcement(heard or self._agreeing)
            self._tx("ID_ACK0")
        else:
            if st in UP_STATES:
                self._down("peer restarted")
            self._answer_announcement(heard)
            if self.secret is not None:
                self._challenge()
            else:
                self._answering_up()
                self._enter_receive("ID_ACK0")

    # --- authentication (with a secret) ---------------------------------------------------
    def _seal(self, content: bytes) -> bytes:
        return self._auth.seal(content) if self._auth is not None else UNSIGNED

    def _content(self, s: Seq) -> bytes:
        """What a sequence's MAC covers: a block's ending and text, or a control's characters."""
        if s.kind in ("ETB", "ETX"):
            return bytes([self.cs.etx if s.kind == "ETX" else self.cs.etb]) + s.data
        return self.cs.bodies[s.kind]

    def _authentic(self, s: Seq) -> bool:
        """With a secret: whether a good sequence's trailer passes. UNSIGNED NAK and DISC pass only
        while signing on; so does the proof block, which _proof_in checks with its proof."""
        if s.trailer == UNSIGNED and s.kind in ("NAK", "DISC"):
            return self._auth is None or self._hs is not None
        if self._auth is None:
            return self._hs is not None and s.kind == "ETX"
        return self._auth.check(self._content(s), s.trailer)

    def _challenge(self) -> None:
        """Answer an ID ENQ with an ID ACK0 carrying our nonce; LineUp waits for the proof block."""
        assert self.secret is not None  # _on_id challenges only on a line with a secret
        self._reset_sender()
        self._hs = Handshake(self.secret, self.peer, self.local, responder_nonce=new_nonce(self.random_bytes))
        ident = self.cs.encode_id(self.local, True, self._hs.responder_nonce)
        self._seq["ID_ACK0"] = self.cs.sequence("ACK0", ident)
        self._enter_receive("ID_ACK0")

    def _prove(self, nonce: bytes, now: float) -> None:
        """The ID ACK0 to our sign-on, with the peer's nonce: send the proof block."""
        assert self.secret is not None  # _on_id proves only on a line with a secret
        if len(nonce) != NONCE_SIZE:  # the nonce or its check was hit on the line: ask again later
            self.counters["bad_ids"] += 1
            return
        self._hs = Handshake(self.secret, self.local, self.peer, new_nonce(self.random_bytes), nonce)
        self._auth = self._hs.frames(self.local)
        self._send_hello(now, PROOF_MAGIC + self._hs.initiator_nonce + self._hs.proof(INITIATOR), 1, "AUTH")

    def _send_hello(self, now: float, text: bytes, parity: int, trace: str) -> None:
        """A sign-on block (the proof, or bsc_agree's commit) in phase AUTH of XMIT: sent again
        on NAK or no answer, up to the retry limit."""
        self._state, self._phase, self._retries, self._parity = State.XMIT, Phase.AUTH, 0, parity
        self._hello = (text, trace)
        self._hello_out(now)

    def _hello_out(self, now: float) -> None:
        text, trace = self._hello
        if self.secret is not None:
            text += self._seal(bytes([self.cs.etx]) + text)
        self._expect_reply(now, self._tx("", self.cs.block(text, True), trace=trace))

    def _proof_in(self, s: Seq) -> None:
        """The proof block, in RECV while signing on: a good one takes us UP, answered ACK1
        (whose MAC proves us); a bad one is refused with DISC."""
        assert self._hs is not None  # _on_receiving takes a block for the proof only while _hs is set
        text, n = s.data, len(PROOF_MAGIC)
        hs = self._hs.with_nonce(text[n:n + NONCE_SIZE])
        auth = hs.frames(self.local)
        if not (text[:n] == PROOF_MAGIC and len(text) == n + NONCE_SIZE + PROOF_SIZE
                and hs.verify(INITIATOR, text[n + NONCE_SIZE:]) and auth.check(self._content(s), s.trailer)):
            self._tx("DISC")
            self._events.append(PeerRefused(self.peer, AUTH_FAILED))
            self._down("authentication failed")
            return
        self._hs, self._auth = None, auth
        self._answering_up()
        self._last_block = s
        self._answer_block(final=False)

    def _proven(self, kind: str, now: float) -> None:
        """Phase AUTH: the ACK1 to our proof block (its MAC passed): the commit block or UP, and on
        transmitting; or the answer to the commit block."""
        if self._hs is None:
            self._committed(now)
        else:
            self._hs = None
            self._go(now, 0)

    def _proof_naked(self, kind: str, now: float) -> None:
        if self._retry(f"{self._hello[1]} block answered NAK"):
            self._hello_out(now)

    def _proof_unanswered(self, now: float) -> None:
        self._timeout(f"no answer to the {self._hello[1]} block")
        if self._retry(f"{self._hello[1]} block again"):
            self._hello_out(now)
