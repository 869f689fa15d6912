"""The seam between the daemon and a line protocol: the interface of docs/DESIGN.md section 4.0 as a
Protocol class, and the factory that builds a line's machine from its configuration."""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from linedrivers.events import Event

from mccs.core import e2e, envelope, routing, segments
from mccs.config import LineConfig
from mccs.core.notices import DAEMON_ROOM

# The sign-on feature of routing lines with the 15-byte envelope (docs/ROUTING.md). "ROUTE" named
# the 11-byte envelope of commit 89dbfdc, which is not spoken: such a peer gets direct traffic only.
ROUTE = "ROUTE2"
#: What a line of this daemon offers at sign-on (FEAT=): routing and its sequenced updates, forgets of
#: transfers, protection end to end (docs/ROUTING.md 1, 2a, 3a; docs/E2E.md).
FEATURES = (ROUTE, routing.SEQROUTE, segments.FORGET, e2e.FEATURE)
#: What a frame holds after a message's text: the routing envelope, then a segment trailer or an
#: end-to-end trailer (a message in segments is not protected end to end: docs/E2E.md).
ROOM = envelope.SIZE + max(segments.SIZE, envelope.E2E_SIZE)


class LineMachine(Protocol):
    """A sans-I/O line protocol state machine (AsyncLine, BscLine, and CallLine around either)."""
    @property
    def counters(self) -> dict: ...
    epoch: str

    def start(self, now: float) -> None: ...
    def stop(self, now: float) -> None: ...
    def send(self, image: bytes, priority: int = 0) -> None: ...  # before images of lower priority not yet sent
    def receive_data(self, data: bytes, now: float) -> None: ...
    def data_to_send(self, now: float | None = None) -> bytes: ...  # `now`: the time, for paced writes
    def next_write(self) -> float | None: ...  # paced writes: when paced() has more of frames built already
    def paced(self, now: float) -> bytes: ...  # those bytes: no event, so no pass is needed for them;
    # next_deadline() moves with them only once they are all handed (next_write() is None)
    def bytes_wanted(self) -> int: ...  # received bytes needed before the next frame can end (>= 1)
    def unconfirmed_room(self) -> int: ...  # messages the peer may still send before our confirm()
    def events(self) -> list[Event]: ...
    def next_deadline(self) -> float | None: ...
    def handle_timeout(self, now: float) -> None: ...
    def confirm(self) -> None: ...
    def set_busy(self, flag: bool) -> None: ...
    def room(self) -> int: ...
    @property
    def receiving(self) -> bool: ...  # the peer holds a half-duplex line: what is handed now interrupts it
    def segment_size(self) -> int: ...  # MESSAGE bytes of the next image of a large message cut in segments


def make_machine(host: str, lc: LineConfig, max_message: int, epoch: str = "",
                 random_bytes: Callable[[int], bytes] | None = None) -> LineMachine:
    """The protocol's machine with every timer and limit from the config. An async line offers
    FEATURES and LARGE= (the host's max_message; a text longer than a frame goes in segments) at
    sign-on; its frames carry at most `frame_max` bytes of text, with room for the routing
    envelope and the segment trailer, which ride inside the image's MESSAGE. A BSC line offers
    the same; both offer `epoch` (EPOCH=, the host's checkpoint epoch). Whatever max_message,
    a line takes whole messages of DAEMON_ROOM bytes: a notice must reach every host.
    `random_bytes`: the machine's random source for sessions and nonces (the shell's: secrets in
    the daemon, seeded in the simulator); None leaves the machine's own (secrets)."""
    machine = _machine(host, lc, max_message, random_bytes)
    if lc.is_call:  # through a modem: up only during a call (docs/CALLS.md)
        from linedrivers.call_line import CallLine
        from linedrivers.hayes import ChatStep, Dialer
        dialer = Dialer(tuple(lc.modem_init), lc.dial, tuple(ChatStep(*step) for step in lc.chat_steps()))
        machine = CallLine(machine, dialer, always=lc.call == "always", answer=lc.answer, idle_hangup=lc.idle_hangup,
                           retry=lc.call_retry, random_bytes=random_bytes)
    machine.epoch = epoch
    return machine


def _machine(host: str, lc: LineConfig, max_message: int,
             random_bytes: Callable[[int], bytes] | None) -> LineMachine:
    common: dict = dict(baud=lc.baud, reply_timeout=lc.reply_timeout, retry_limit=lc.retry_limit)
    if random_bytes is not None:
        common["random_bytes"] = random_bytes
    if lc.secret is not None:
        common["secret"] = lc.secret
    if lc.protocol == "async":
        from linedrivers import AsyncLine
        frame = min(max(max_message, DAEMON_ROOM), lc.frame_max) + ROOM
        return AsyncLine(host, lc.peer, window=lc.window, xonxoff_safe=lc.xonxoff_safe, keepalive=lc.keepalive,
                         features=FEATURES, max_message=frame, large=max_message, abort=lc.frame_abort, **common)
    # BSC offers ROUTE and LARGE= in an announcement a version-1 station drops (docs/PROTOCOL.md,
    # "BSC: features and large messages"); whole images stay up to 64 KiB, so a version-1 peer still
    # gets whole messages of that size, and segments are the machine's segment_size().
    from linedrivers import BscLine
    from linedrivers.image import HEADER_SIZE
    return BscLine(host, lc.peer, role=lc.role, code=lc.code, block_size=lc.block_size,
                   max_message=min(max(max_message, DAEMON_ROOM), 65535 - HEADER_SIZE - ROOM) + ROOM, features=FEATURES,
                   large=max_message, disconnect_timeout=lc.disconnect_timeout, ttd_timeout=lc.ttd_timeout,
                   **common)
