"""An emulated Hayes modem, for testing lines that are calls over pseudo-terminals (mccs.testbed.
vserial_line, `Line(..., modems=...)`). Sans-I/O: what its DTE (the daemon's port) writes comes
in with the time; what it says to the DTE and what it puts on the wire come out.

Two modems are joined as the two ends of one line, each with its number. `ATD<number>` rings the
other (RING every RING_EVERY s), which answers with `ATA` or by itself after S0 rings; both then
say `CONNECT <baud>` and pass data (the line paces it, with its noise). `+++` between guard times
of silence (S12, 1 s) returns to command mode with the call held (`ATO` goes back, `ATH` hangs up);
the other end then says `NO CARRIER`. In the simulator (mccs.testbed.hostsim) its DTE may also have modem
lines: DTR dropped hangs up (&D2), and DCD is on during a call (&C1). A call to a modem off hook
(dialling, ringing or in a call) finds it `BUSY`; one not answered in RINGS_MAX rings, `NO ANSWER`.
Faults on demand: `busy`, `no_answer`, `no_dialtone`, `drop_after` (the carrier is lost that many
seconds into every call).
Deterministic: no randomness, and every delay is a constant.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

RING_EVERY = 2.0  # seconds between two RINGs
RINGS_MAX = 6  # rings before the caller hears NO ANSWER
CONNECT_DELAY = 0.3  # seconds of carrier handshake after ATA
GUARD = 1.0  # S12: the escape's guard time, seconds
DIAL_DIGITS = re.compile(r"[0-9*#]")


class ModemState(StrEnum):
    COMMAND = "command"  # on hook (or off hook after a call, until ATH)
    DIALLING = "dialling"
    RINGING = "ringing"
    CONNECTING = "connecting"  # answered: the handshake
    ONLINE = "online"
    ONLINE_COMMAND = "online command"  # escaped with +++: the call is held


@dataclass
class Faults:
    busy: bool = False  # calls to this modem find it busy
    no_answer: bool = False  # it rings, but ATA and S0 do nothing
    no_dialtone: bool = False  # its own ATD says NO DIALTONE
    drop_after: float | None = None  # seconds into each call its carrier is lost
    ignore_dtr: bool = False  # &D0: DTR dropped does nothing


class HayesModem:
    def __init__(self, number: str, baud: int, faults: Faults | None = None):
        self.number, self.baud = number, baud
        self.faults = faults or Faults()
        self.other: HayesModem | None = None  # the modem at the line's other end
        self.state = ModemState.COMMAND
        self.echo, self.auto_answer = True, 0
        self.rings = 0
        self._line = b""
        self._dte: list[bytes] = []
        self._timer: float | None = None  # the next ring, handshake end, NO ANSWER or carrier loss
        self._last_dte = float("-inf")  # when the DTE last wrote, online (the escape's guard)
        self._plus = b""  # an escape's "+" held back, and since when
        self._plus_at = 0.0
        self.counters = dict.fromkeys(("calls", "answered", "busy", "no_answer", "carrier_lost", "dtr_hangups"), 0)
        # the command phase at the DTE, both ways (commands, escapes, echoes, results): what a call
        # costs on the port besides its data, whatever program drives the modem (`mccs bench calls`)
        self.counters["command_bytes"] = 0

    # -- inputs ----------------------------------------------------------------------------------
    def from_dte(self, data: bytes, now: float) -> bytes:
        """What the DTE wrote; returns the bytes for the wire (in a call only)."""
        if self.state is ModemState.ONLINE:
            return self._online(data, now)
        if self.state in (ModemState.DIALLING, ModemState.CONNECTING) and data:
            self._say("NO CARRIER")  # a key pressed while dialling aborts the call
            self._drop_call(now)
            return b""
        self.counters["command_bytes"] += len(data)
        for byte in data:
            if self.echo:
                self._dte.append(bytes((byte,)))
            if byte in b"\r\n":
                line, self._line = self._line.strip(), b""
                if line:
                    self._command(line.decode("latin-1"), now)
            elif len(self._line) < 256:
                self._line += bytes((byte,))
        return b""

    def from_wire(self, data: bytes) -> bytes:
        """What the other modem sent: for the DTE, in a call only."""
        return data if self.state is ModemState.ONLINE else b""

    def tick(self, now: float) -> None:
        """Timers: rings, the handshake, NO ANSWER, the escape's second guard, a dropped carrier."""
        if self._plus and now >= self._plus_at + GUARD:
            self.counters["command_bytes"] += len(self._plus)
            self._plus = b""
            self.state = ModemState.ONLINE_COMMAND
            self._say("OK")
        if self._timer is None or now < self._timer:
            return
        self._timer = None
        if self.state is ModemState.RINGING:
            self._ring(now)
        elif self.state is ModemState.CONNECTING:
            self._connect(now)
        elif self.state in (ModemState.ONLINE, ModemState.ONLINE_COMMAND):
            self.counters["carrier_lost"] += 1
            self._lose_carrier(now)

    # -- outputs ---------------------------------------------------------------------------------
    def to_dte(self) -> bytes:
        out, self._dte = b"".join(self._dte), []
        self.counters["command_bytes"] += len(out)
        return out

    def next_deadline(self) -> float | None:
        times = [t for t in (self._timer, self._plus_at + GUARD if self._plus else None) if t is not None]
        return min(times, default=None)

    @property
    def online(self) -> bool:
        return self.state is ModemState.ONLINE

    @property
    def dcd(self) -> bool:
        """Data Carrier Detect (&C1): on while a call is up, escaped or not."""
        return self.state in (ModemState.ONLINE, ModemState.ONLINE_COMMAND)

    def set_dtr(self, level: bool, now: float) -> None:
        """DTR from the DTE (&D2): dropped, any call is hung up and the modem is back in command mode."""
        if not level and self.state is not ModemState.COMMAND and not self.faults.ignore_dtr:
            self.counters["dtr_hangups"] += 1
            self._drop_call(now)

    # -- commands --------------------------------------------------------------------------------
    def _command(self, line: str, now: float) -> None:
        if not line[:2].upper() == "AT":
            return
        rest = line[2:]
        i = 0
        while i < len(rest):
            c = rest[i].upper()
            i += 1
            if c == "D":
                self._dial(rest[i:], now)
                return
            if c == "A":
                self._answer(now)
                return
            if c == "O":
                if self.state is ModemState.ONLINE_COMMAND:
                    self.state = ModemState.ONLINE
                    self._say(f"CONNECT {self.baud}")
                    return
                self._say("NO CARRIER")
                return
            if c == "H":
                i = _digits(rest, i)[1]
                self._hang_up(now)
            elif c == "Z":
                self.echo, self.auto_answer = True, 0
            elif c == "E":
                value, i = _digits(rest, i)
                self.echo = value != 0
            elif c == "S":
                register, i = _digits(rest, i)
                if i < len(rest) and rest[i] == "=":
                    value, i = _digits(rest, i + 1)
                    if register == 0:
                        self.auto_answer = value
                elif i < len(rest) and rest[i] == "?":
                    i += 1
            elif c == "&":
                i = _digits(rest, i + 1)[1]
            elif c.isalpha():  # V, Q, X, L, M ...: taken, and done nothing with
                i = _digits(rest, i)[1]
            elif c != " ":
                self._say("ERROR")
                return
        self._say("OK")

    def _dial(self, text: str, now: float) -> None:
        number = "".join(DIAL_DIGITS.findall(text))
        other = self.other
        if self.state is not ModemState.COMMAND:
            self._say("ERROR")
        elif self.faults.no_dialtone:
            self._say("NO DIALTONE")
        elif other is None or not number or number != other.number:
            self._say("NO ANSWER")
        elif other.faults.busy or other.state is not ModemState.COMMAND:
            other.counters["busy"] += 1
            self._say("BUSY")
        else:
            self.counters["calls"] += 1
            self.state = ModemState.DIALLING
            other.state, other.rings = ModemState.RINGING, 0
            other._ring(now)

    def _ring(self, now: float) -> None:
        caller = self.other
        if caller is None or caller.state is not ModemState.DIALLING:
            self.state = ModemState.COMMAND
            return
        if self.rings >= RINGS_MAX:
            self.counters["no_answer"] += 1
            self.state = caller.state = ModemState.COMMAND
            caller._say("NO ANSWER")
            return
        self.rings += 1
        self._say("RING")
        if self.auto_answer and self.rings >= self.auto_answer and not self.faults.no_answer:
            self._answer(now)
        else:
            self._timer = now + RING_EVERY

    def _answer(self, now: float) -> None:
        caller = self.other
        if self.state is not ModemState.RINGING or self.faults.no_answer or caller is None:
            if self.state is not ModemState.RINGING:
                self._say("NO CARRIER")
            return
        self.counters["answered"] += 1
        self.state = caller.state = ModemState.CONNECTING
        self._timer, caller._timer = now + CONNECT_DELAY, None

    def _connect(self, now: float) -> None:
        caller = self.other
        if caller is None or caller.state is not ModemState.CONNECTING:
            self.state = ModemState.COMMAND
            return
        drop = self.faults.drop_after if self.faults.drop_after is not None else caller.faults.drop_after
        for modem in (self, caller):
            modem.state, modem._plus, modem._last_dte = ModemState.ONLINE, b"", float("-inf")
            modem._say(f"CONNECT {self.baud}")
        self._timer = now + drop if drop is not None else None

    # -- online ----------------------------------------------------------------------------------
    def _online(self, data: bytes, now: float) -> bytes:
        """Data for the wire, but an escape: "+++" after a guard time of silence (held back until
        the second guard time passes without another byte)."""
        if not data:
            return b""
        quiet = now - self._last_dte >= GUARD
        self._last_dte = now
        if (self._plus or quiet) and data and set(data) == {ord("+")} and len(self._plus + data) <= 3:
            self._plus += data
            if len(self._plus) < 3:
                return b""
            self._plus_at = now
            return b""
        held, self._plus = self._plus, b""
        return held + data

    def _hang_up(self, now: float) -> None:
        """ATH: on hook; the other end of a call hears NO CARRIER."""
        if self.state in (ModemState.ONLINE_COMMAND, ModemState.ONLINE, ModemState.CONNECTING):
            self._drop_call(now)

    def _lose_carrier(self, now: float) -> None:
        self._say("NO CARRIER")
        self._drop_call(now)

    def _drop_call(self, now: float) -> None:
        other = self.other
        self.state, self._timer, self._plus = ModemState.COMMAND, None, b""
        if other is not None and other.state is not ModemState.COMMAND:
            other.state, other._timer, other._plus = ModemState.COMMAND, None, b""
            other._say("NO CARRIER")

    def _say(self, text: str) -> None:
        self._dte.append(b"\r\n" + text.encode("ascii") + b"\r\n")


def _digits(text: str, i: int) -> tuple[int, int]:
    """The number at text[i:] (0 if none), and where it ends."""
    j = i
    while j < len(text) and text[j].isdigit():
        j += 1
    return (int(text[i:j]) if j > i else 0), j
