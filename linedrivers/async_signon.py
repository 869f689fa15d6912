"""Signing on an async line (docs/DESIGN.md 4.1; with a secret, docs/PROTOCOL.md): S, T and, with
a secret, V; refusals with O. A part of AsyncLine (a mixin). What each sign-on frame does in
each state is the table SIGNON at the end of this module (async_states draws it).

With a secret, T's proof covers the S it answers and T itself, V's proof S, T and V, each body
as it went on the line (`covered`): a field changed on the way (EPOCH=, FEAT=, WINDOW=, ...)
fails a proof and the sign-on is refused, as with a wrong secret.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .async_frames import ABORT, FCS32, FEC, REFUSED, SREJ, Deframer, SignOn
from .async_states import Await, SignOnKind, State
from .auth import AUTH_FAILED, INITIATOR, RESPONDER, FrameAuth, Handshake, new_nonce
from .events import Event, LineUp, PeerRefused


def covered(body: bytes) -> bytes:
    """A sign-on body as the proofs cover it: its bytes as they came, every token in its order,
    unknown ones too, less PROOF= (a proof cannot cover itself)."""
    return b" ".join(t for t in body.split(b" ") if not t.startswith(b"PROOF="))


class AsyncSignOn:
    """Sign-on and sign-off frames; the rest of the machine is AsyncLine's."""
    #: This host's checkpoint epoch, offered as EPOCH= (set by the owner; "" offers none).
    epoch: str = ""
    #: Our last S, sent again byte for byte (V's proof covers it as sent).
    _s_body: bytes = b""

    # AsyncLine's, used here: declared for the type checker (AsyncLine.__init__ and _reset set them).
    local: str
    peer: str
    window: int
    max_message: int
    large: int
    features: tuple[str, ...]
    secret: bytes | None
    random_bytes: Callable[[int], bytes]
    counters: dict[str, int]
    state: State
    session: str
    _peer_session: str
    _nonce: bytes
    _hs: Handshake | None
    _t_body: bytes
    _v_body: bytes
    _auth: FrameAuth | None
    _deframer: Deframer
    _events: list[Event]
    _sr: bool
    _fcs32: bool
    _fec: bool
    _abort: bool

    if TYPE_CHECKING:
        def _emit(self, kind: str, seq: int = 0, ack: int = 0, body: bytes = b"",
                  retransmit: bool = False, seal: bool = True) -> None: ...
        def _reset(self, window: int, maxmsg: int) -> None: ...
        def _await(self, what: Await | None) -> None: ...
        def _down(self, reason: str) -> None: ...

    def _signon_body(self, session: str, nonce: bytes = b"", proof: bytes = b"") -> bytes:
        return SignOn(self.local, self.window, self.max_message, session, nonce, proof, self.features,
                      self.large, self.epoch).encode()

    def _send_signon(self, kind: str, session: str) -> None:
        self._emit(kind, body=self._s_body if kind == "S" else self._signon_body(session))

    def _sign_on(self) -> None:
        """Send S with a fresh SESSION (with a secret, a fresh nonce too) and wait for T."""
        self.session = self.random_bytes(4).hex()
        self._nonce = new_nonce(self.random_bytes) if self.secret is not None else b""
        self._s_body = self._signon_body(self.session, self._nonce)
        self._send_signon("S", self.session)
        self._await(Await.SIGNON)

    def _signon_in(self, kind: str, body: bytes) -> None:
        """An S, T, V or O frame: the handler SIGNON names for it in our state (a malformed S, T
        or V is counted and dropped in any state)."""
        signon = None
        if kind != SignOnKind.O and (signon := SignOn.parse(body)) is None:
            self.counters["bad_frames"] += 1
            return
        handler = SIGNON[self.state][SignOnKind(kind)]
        if handler is IGNORED:
            self.counters["ignored"] += 1  # a late or repeated frame, or one that means nothing now
        else:
            handler(self, signon, body)

    def _admissible(self, kind: str, signon: SignOn) -> bool:
        """Is an S or T from the configured peer, authenticated as this line is? Else refused."""
        if signon.host != self.peer:
            self._refuse(signon.host, "", kind, "wrong peer")
        elif self.secret is not None and not signon.nonce:
            self._refuse(signon.host, "signed on without authentication, but this line has a secret",
                         kind, "no authentication")  # plain REFUSED: the peer may predate authentication
        elif self.secret is None and signon.nonce:
            self._refuse(signon.host, "asks for authentication, but this line has no secret",
                         kind, "no secret", "peer has no secret")
        else:
            return True
        return False

    def _s_in(self, signon: SignOn, body: bytes) -> None:
        """The peer signs on: with a secret, answered by _answer; without, UP at once with T (or
        our T again, if the peer repeated the S we answered: nothing was acknowledged yet)."""
        if not self._admissible("S", signon):
            return
        if self.secret is not None:
            self._answer(signon, body)
        elif self.state is State.UP and signon.session and signon.session == self._peer_session:
            self._send_signon("T", signon.session)
        else:
            if self.state is State.UP:
                self._down("peer restarted")
            self._go_up(signon, reply=("T", self._signon_body(signon.session)))

    def _t_in(self, signon: SignOn, body: bytes) -> None:
        """The answer to our S (another SESSION: a late reply to an earlier one, ignored)."""
        if signon.session != self.session:
            self.counters["ignored"] += 1
        elif self._admissible("T", signon):
            if self.secret is not None:
                self._answered(signon, body)
            else:
                self._go_up(signon)

    def _t_again(self, signon: SignOn, body: bytes) -> None:
        """A T while UP: the peer repeats its answer to our S, so our V was lost; V again."""
        if self._v_body and signon.session == self.session:
            self._emit("V", body=self._v_body)
        else:
            self.counters["ignored"] += 1

    def _go_up(self, signon: SignOn, hs: Handshake | None = None,
               reply: tuple[str, bytes] | None = None) -> None:
        """The sign-on `signon` is in force: fresh sequence state, the reply (T or V), LineUp."""
        self.state = State.UP
        self._peer_session = signon.session
        self._reset(min(self.window, signon.window), min(self.max_message, signon.maxmsg))
        self._auth = hs.frames(self.local) if hs is not None else None
        if reply:
            self._emit(reply[0], body=reply[1])
        self.counters["signons"] += 1
        agreed = frozenset(self.features) & frozenset(signon.features)
        self._sr = SREJ in agreed
        self._fcs32 = self._deframer.fcs32 = FCS32 in agreed
        self._fec = self._deframer.fec = self._fcs32 and FEC in agreed
        self._abort = self._deframer.abort = ABORT in agreed
        large = min(self.large, signon.large) if self.large and signon.large else 0
        self._events.append(LineUp(self.peer, agreed, large, signon.epoch))

    def _refuse(self, host: str, why: str, kind: str, down: str, note: str = "") -> None:
        """Refuse a sign-on with O, not sealed (the peer may hold no key) except the refusal of a
        V (sealed by _proof_in: the initiator is UP and drops an O without a good trailer); a
        sign-on of ours under way (a T or V refused) goes DOWN with `down`."""
        self._emit("O", body=REFUSED + (b" " + note.encode("ascii") if note else b""), seal=kind == "V")
        self._events.append(PeerRefused(host, why))
        if kind != "S":
            self._down(down)

    def _answer(self, signon: SignOn, body: bytes) -> None:
        """With a secret: answer an S with T (our nonce and proof) and wait VERIFYING for V."""
        assert self.secret is not None  # _s_in answers so only on a line with a secret
        if self.state is State.SIGNING_ON and self.local > signon.host:
            self.counters["ignored"] += 1  # both signing on: the end with the lower host id answers
            return
        if self._t_body and signon.session == self._peer_session:
            self._emit("T", body=self._t_body)  # the peer repeated its S: our T was lost or late
            return
        if self.state is State.UP:
            self._down("peer restarted")
        self.state, self.session, self._peer_session = State.VERIFYING, "", signon.session
        self._reset(min(self.window, signon.window), min(self.max_message, signon.maxmsg))
        hs = Handshake(self.secret, signon.host, self.local, signon.nonce, new_nonce(self.random_bytes))
        self._hs = hs = hs.covering(covered(body), self._signon_body(signon.session, hs.responder_nonce))
        self._t_body = self._signon_body(signon.session, hs.responder_nonce, hs.proof(RESPONDER))
        self._emit("T", body=self._t_body)
        self._await(Await.PROOF)

    def _answered(self, signon: SignOn, body: bytes) -> None:
        """With a secret: the T to our S. A good proof takes us UP, proving ourselves with V."""
        assert self.secret is not None  # _t_in comes here only on a line with a secret
        hs = Handshake(self.secret, self.local, signon.host, self._nonce, signon.nonce).covering(
            self._s_body, covered(body))
        if not hs.verify(RESPONDER, signon.proof):
            self._refuse(signon.host, AUTH_FAILED, "T", "authentication failed", "authentication failed")
            return
        hs = hs.covering(self._signon_body(signon.session))
        self._v_body = self._signon_body(signon.session, proof=hs.proof(INITIATOR))
        self._go_up(signon, hs, ("V", self._v_body))

    def _proof_in(self, signon: SignOn, body: bytes) -> None:
        """V: the proof of the end whose S we answered."""
        assert self._hs is not None  # VERIFYING (SIGNON's only state for V): _answer set it
        if signon.session != self._peer_session or signon.host != self.peer:
            self.counters["ignored"] += 1
        elif self._hs.covering(covered(body)).verify(INITIATOR, signon.proof):
            self._go_up(signon, self._hs)
        else:
            self._auth = self._hs.frames(self.local)  # to seal the refusal; _down drops the keys
            self._refuse(signon.host, AUTH_FAILED, "V", "authentication failed", "authentication failed")

    def _signoff_in(self, signon: None, body: bytes) -> None:
        """O: the peer signs off, or refuses our sign-on (REFUSED and a note)."""
        refused = body == REFUSED or body.startswith(REFUSED + b" ")
        why = "refused"
        if len(body) > len(REFUSED) + 1:  # the refusing end's note, shown as it came (printable, short)
            why += ": " + "".join(c if c.isprintable() else "?" for c in body[8:72].decode("ascii", "replace"))
        if self.state is State.UP:
            self._down(why if refused else "peer signed off")
        elif refused:
            self._down(why)
        else:
            self.counters["ignored"] += 1  # a sign-off while we sign on: not an answer to it


Handler = Callable[..., None]  # handler(line, the frame's SignOn (None for O), its body)
IGNORED = None  # a frame that means nothing in that state: counted `ignored` and dropped, explicitly

#: State -> sign-on frame received -> handler; every state, every kind (a test checks it).
SIGNON: dict[State, dict[SignOnKind, Handler | None]] = {
    State.DOWN: {SignOnKind.S: AsyncSignOn._s_in, SignOnKind.T: IGNORED, SignOnKind.V: IGNORED,
                 SignOnKind.O: IGNORED},
    State.SIGNING_ON: {SignOnKind.S: AsyncSignOn._s_in, SignOnKind.T: AsyncSignOn._t_in, SignOnKind.V: IGNORED,
                       SignOnKind.O: AsyncSignOn._signoff_in},
    State.VERIFYING: {SignOnKind.S: AsyncSignOn._s_in, SignOnKind.T: IGNORED, SignOnKind.V: AsyncSignOn._proof_in,
                      SignOnKind.O: AsyncSignOn._signoff_in},
    State.UP: {SignOnKind.S: AsyncSignOn._s_in, SignOnKind.T: AsyncSignOn._t_again, SignOnKind.V: IGNORED,
               SignOnKind.O: AsyncSignOn._signoff_in},
}
