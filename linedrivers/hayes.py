"""The command phase of a Hayes (AT command) modem as a sans-I/O state machine: initialise it,
dial or answer, run a UUCP-style chat, and hang up. Bytes and time in; bytes, events and the next
deadline out. A line that is a call (linedrivers.call_line) runs one of these around its protocol:
the protocol's bytes pass only while the call is connected.

    ATZ\\r -> OK, ATE0V1\\r -> OK        the `init` commands, each answered OK within `command_timeout`
    ATD5551234\\r -> CONNECT 9600       dialling: CONNECT, or BUSY, NO CARRIER, NO ANSWER,
                                        NO DIALTONE, ERROR within `connect_timeout`
    RING -> ATA\\r -> CONNECT 9600       answering (RING -> CONNECT: an init with ATS0=n, the modem answers)
    "login:" -> mccs\\r ...              the chat, after CONNECT: expect a text, send a line, each
                                        step within its own timeout
    (guard) +++ (guard) ATH0\\r -> OK    hanging up: the escape to command mode, with its guard times
    DTR low (dtr_drop s), DTR high       hanging up on a port with modem lines (the modem at &D2); the
                                        escape too unless DCD, on when it began, is now off (&D0, no DTR wire)

The modem's answers are verbose (V1) lines; an echo of our own command (a modem still at E1) and
lines it adds of its own are passed over.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Result(StrEnum):
    CONNECT = "CONNECT"
    BUSY = "BUSY"
    NO_CARRIER = "NO CARRIER"
    NO_ANSWER = "NO ANSWER"
    NO_DIALTONE = "NO DIALTONE"
    ERROR = "ERROR"
    TIMEOUT = "TIMEOUT"  # no answer from the modem (or the chat's text never came) in time


class Phase(StrEnum):
    IDLE = "idle"  # on hook, not initialised
    INIT = "init"  # sending the init commands
    READY = "ready"  # on hook, initialised: waiting for a RING or a dial()
    DIALLING = "dialling"
    ANSWERING = "answering"
    CHAT = "chat"
    CONNECTED = "connected"
    HANGING_UP = "hanging up"


@dataclass(frozen=True)
class ChatStep:
    expect: str  # text to wait for ("": none)
    send: str  # line to send then (a carriage return is added; "": nothing)
    timeout: float = 30.0


@dataclass
class Connected:
    baud: int | None  # as the modem said (CONNECT 9600), None if it did not
    answered: bool  # this end answered a call (else it dialled)


@dataclass
class Failed:
    result: Result
    detail: str = ""


@dataclass
class HungUp:
    detail: str = ""


@dataclass
class Ringing:
    pass


CallEvent = Connected | Failed | HungUp | Ringing
RESULT_LINE = re.compile(r"^(CONNECT|BUSY|NO CARRIER|NO ANSWER|NO DIALTONE|ERROR|OK|RING)\b(.*)$")
AUTO_ANSWER = re.compile(r"S0=0*[1-9]")
LINE_MAX = 256  # characters of a modem line kept while waiting for its end
DTR_LOW = -1  # the hang-up step while DTR is held low


class Dialer:
    """One end's modem in its command phase (see the module docstring)."""

    def __init__(self, init: tuple[str, ...] = ("ATZ", "ATE0V1"), number: str = "",
                 chat: tuple[ChatStep, ...] = (), command_timeout: float = 5.0, connect_timeout: float = 60.0,
                 guard: float = 1.1, dtr_drop: float = 1.0):
        self.init, self.number, self.chat = tuple(init), number, tuple(chat)
        # an init that sets S0 makes the modem answer by itself: a RING is then not answered with ATA
        # (a key pressed while the modem answers would abort the call)
        self.auto_answer = any(AUTO_ANSWER.search(c.upper()) for c in self.init)
        self.command_timeout, self.connect_timeout, self.guard = command_timeout, connect_timeout, guard
        self.dtr_drop = dtr_drop
        self.has_dtr = False  # the port has modem lines: hang up by dropping DTR (the owner says so)
        self.dtr = True  # the level DTR should be at; the owner reads changes with dtr_change()
        self._dtr_told = True
        self.dcd: bool | None = None  # the port's DCD as last told (carrier()); None: not known
        self._dcd_at_hang_up: bool | None = None  # DCD when the hang-up began: on, then off, is on hook
        self._escape = True  # the hang-up's escape is wanted (the modem is not in command mode already)
        self.phase = Phase.IDLE
        self.dial_wanted = False
        self._step = 0  # the next init command, chat step or hang-up step
        self._deadline: float | None = None
        self._line = ""  # a modem line being read
        self._text = ""  # what came since the chat step began
        self._out: list[bytes] = []
        self._events: list[CallEvent] = []
        self._pending = Connected(None, False)  # said once the chat, if any, is done

    # -- inputs ---------------------------------------------------------------------------------
    def start(self, now: float) -> None:
        """Initialise the modem (again), then wait for a RING or a dial()."""
        if self.phase in (Phase.IDLE, Phase.READY):
            self._init(now)

    def dial(self, now: float) -> None:
        """Call the number: at once if the modem is ready, else when its init is done."""
        self.dial_wanted = True
        if self.phase is Phase.IDLE:
            self._init(now)
        elif self.phase is Phase.READY:
            self._dial(now)

    def hang_up(self, now: float, escape: bool = True) -> None:
        """Back on hook from any phase: DTR dropped for dtr_drop seconds where the port can, else the
        escape (+++, between guard times) and ATH0; without the escape when the modem is in command
        mode already (it said NO CARRIER)."""
        if self.phase in (Phase.IDLE, Phase.READY, Phase.HANGING_UP):
            return
        self.dial_wanted = False
        if self.has_dtr:
            self.dtr, self._out = False, []  # (a command not yet written is no use now)
            self._dcd_at_hang_up, self._escape = self.dcd, escape
            self.phase, self._step, self._deadline = Phase.HANGING_UP, DTR_LOW, now + self.dtr_drop
            return
        self.phase, self._step, self._deadline = Phase.HANGING_UP, 0 if escape else 1, now + self.guard

    def receive_data(self, data: bytes, now: float) -> bytes:
        """Bytes from the modem in its command phase. Returns those that follow CONNECT (and the
        chat) in the same read: the first of the call's data."""
        for i, byte in enumerate(data):
            if self.phase is Phase.CONNECTED:  # (the LF that ends the CONNECT line is not data)
                return data[i + 1:] if byte == 10 else data[i:]
            char = chr(byte) if byte < 128 else "?"
            if self.phase is Phase.CHAT:
                self._text = (self._text + char)[-LINE_MAX:]
                self._chat_text(now)
                continue
            if char in "\r\n":
                line, self._line = self._line.strip(), ""
                if line:
                    self._modem_line(line, now)
            elif len(self._line) < LINE_MAX:
                self._line += char
        return b""

    def handle_timeout(self, now: float) -> None:
        if self._deadline is None or now < self._deadline:
            return
        self._deadline = None
        if self.phase is Phase.HANGING_UP:
            self._hang_up_step(now)
        elif self.phase in (Phase.INIT, Phase.DIALLING, Phase.ANSWERING):
            self._fail(Result.TIMEOUT, f"no answer from the modem while {self.phase}")
        elif self.phase is Phase.CHAT:
            self._fail(Result.TIMEOUT, f"the chat's {self.chat[self._step].expect!r} never came")

    # -- outputs --------------------------------------------------------------------------------
    def data_to_send(self) -> bytes:
        out, self._out = b"".join(self._out), []
        return out

    def events(self) -> list[CallEvent]:
        events, self._events = self._events, []
        return events

    def carrier(self, on: bool) -> None:
        """The port's DCD, as the owner reads it."""
        self.dcd = on

    def dtr_change(self) -> bool | None:
        """The level the port's DTR is to be set to, if it changed since last asked (else None)."""
        if self.dtr == self._dtr_told:
            return None
        self._dtr_told = self.dtr
        return self.dtr

    def next_deadline(self) -> float | None:
        return self._deadline

    # -- the phases -----------------------------------------------------------------------------
    def _command(self, text: str, now: float, wait: float) -> None:
        self._out.append(text.encode("ascii") + b"\r")
        self._deadline = now + wait

    def _init(self, now: float) -> None:
        self.phase, self._step, self._line = Phase.INIT, 0, ""
        self._next_init(now)

    def _next_init(self, now: float) -> None:
        if self._step < len(self.init):
            self._command(self.init[self._step], now, self.command_timeout)
            self._step += 1
            return
        self.phase, self._deadline = Phase.READY, None
        if self.dial_wanted:
            self._dial(now)

    def _dial(self, now: float) -> None:
        self.phase = Phase.DIALLING
        self._command(f"ATD{self.number}", now, self.connect_timeout)

    def _modem_line(self, line: str, now: float) -> None:
        match = RESULT_LINE.match(line)
        if match is None:  # an echo of our command, or something of the modem's own
            return
        word, rest = match.group(1), match.group(2).strip()
        if word == "RING":
            self._events.append(Ringing())
            if self.phase is Phase.READY:
                self.phase = Phase.ANSWERING
                if self.auto_answer:
                    self._deadline = now + self.connect_timeout
                else:
                    self._command("ATA", now, self.connect_timeout)
        elif self.phase is Phase.INIT:
            if word == "OK":
                self._next_init(now)
            elif word == "ERROR":
                self._fail(Result.ERROR, f"the modem refused {self.init[self._step - 1]!r}")
        elif self.phase in (Phase.DIALLING, Phase.ANSWERING, Phase.READY):
            if word == "CONNECT":
                self._connected(rest, now)
            elif word != "OK" and self.phase is not Phase.READY:
                self._fail(Result(word), f"while {self.phase}")
        elif self.phase is Phase.HANGING_UP and self._step == 2 and word in ("OK", "NO CARRIER"):
            self._on_hook(f"the modem said {word}")

    def _connected(self, rest: str, now: float) -> None:
        answered = self.phase is not Phase.DIALLING
        self.dial_wanted = False
        baud = int(rest.split()[0]) if rest and rest.split()[0].isdigit() else None
        self._pending = Connected(baud, answered)
        if self.chat and not answered:
            self.phase, self._step, self._text = Phase.CHAT, 0, ""
            self._chat_step(now)
        else:
            self._up()

    def _up(self) -> None:
        self.phase, self._deadline = Phase.CONNECTED, None
        self._events.append(self._pending)

    def _chat_step(self, now: float) -> None:
        if self._step >= len(self.chat):
            self._up()
            return
        step = self.chat[self._step]
        self._deadline = now + step.timeout
        self._chat_text(now)

    def _chat_text(self, now: float) -> None:
        step = self.chat[self._step]
        if step.expect and step.expect not in self._text:
            return
        if step.send:
            self._out.append(step.send.encode("latin-1") + b"\r")
        self._step, self._text = self._step + 1, ""
        self._chat_step(now)

    def _hang_up_step(self, now: float) -> None:
        """After a guard time of silence: +++; after another: ATH0; then its answer (or a time).
        With DTR: once it has been low for dtr_drop, it is raised again and the modem is on hook."""
        if self._step == DTR_LOW:
            self.dtr = True
            if self._dcd_at_hang_up and self.dcd is False:
                self._on_hook(f"DTR dropped for {self.dtr_drop:g} s")
            else:  # the carrier was not seen go: a modem that ignores DTR (or still dials) must hang up too
                self._step, self._deadline = 0 if self._escape else 1, now + self.guard
        elif self._step == 0:
            self._out.append(b"+++")
            self._step, self._deadline = 1, now + self.guard
        elif self._step == 1:  # (a CR first ends whatever the modem took for a command: "+++" in command mode)
            self._step, self._line = 2, ""
            self._command("\rATH0", now, self.command_timeout)
        else:
            self._on_hook("the modem did not answer ATH0")

    def _on_hook(self, detail: str) -> None:
        self.phase, self._deadline = Phase.IDLE, None  # initialised again before the next call
        self._events.append(HungUp(detail))

    def _fail(self, result: Result, detail: str) -> None:
        self.dial_wanted = False
        self.phase, self._deadline = Phase.IDLE, None
        self._events.append(Failed(result, detail))
