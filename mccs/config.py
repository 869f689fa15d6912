"""Host configuration from TOML (docs/DESIGN.md section 8): every timer and limit is a key.

Relative paths are relative to the config file; an unknown key is an error that names it.
"""
from __future__ import annotations

import dataclasses
import grp
import os
import pwd
import re
import shlex
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from linedrivers.ids import IdError, check_host_id, process_id, process_name
from linedrivers.wire import char_time

from mccs.core import envelope, segments
from mccs.core.schedule import ScheduleError
from mccs.core.schedule import parse as parse_window


class ConfigError(ValueError):
    """A bad configuration: the message names the file, the key and the reason."""


def _internal(default=None, factory=None):
    """A field filled in by the loader, not a TOML key."""
    if factory is not None:
        return field(default_factory=factory, metadata={"internal": True})
    return field(default=default, metadata={"internal": True})


SECRET_MIN = 16  # bytes in a line's secret_file
MAX_MESSAGE = 16 << 20  # the largest max_message: 16 MiB (more than a frame goes in segments, mccs.core.segments)
FRAME_MAX = 65535 - envelope.SIZE - segments.SIZE  # an image's LENGTH is 16 bits


@dataclass
class LineConfig:
    peer: str
    port: str
    protocol: str = "async"
    baud: int = 9600
    bytesize: int = 8
    parity: str = "N"
    stopbits: float = 1
    rtscts: bool = False
    xonxoff: bool = False
    role: str = "primary"
    code: str = "ebcdic"
    block_size: int = 256
    window: int = 8
    frame_max: int = 8192  # async: the most MESSAGE bytes one frame carries (a larger message goes in segments)
    xonxoff_safe: bool = False
    frame_abort: bool = True  # async: offer ABORT (a message of higher priority cuts a frame short): paced writes
    reply_timeout: float = 3.0
    retry_limit: int = 7
    disconnect_timeout: float = 20.0
    ttd_timeout: float = 2.0
    keepalive: float = 30.0
    backoff_max: float = 60.0
    ack_hold: float = 0.05  # async: how long a message received may wait to share its commit and ACK with the next
    secret_file: str = ""  # a shared secret: sign-on by challenge-response, every frame authenticated
    secret: bytes | None = _internal()
    # a line that is a call through a Hayes modem (docs/CALLS.md): with `dial` this end calls, with `answer` it
    # answers; "always" keeps a call up, "demand" calls when messages wait and hangs up when idle
    call: str = "always"
    dial: str = ""
    answer: bool = False
    modem_init: list = field(default_factory=lambda: ["ATZ", "ATE0V1"])
    chat: list = field(default_factory=list)  # expect, send, expect, send ...; "login:~10": wait 10 s for it
    idle_hangup: float = 60.0
    call_retry: float = 30.0  # after a failed call, doubling up to an hour
    schedule: list = field(default_factory=list)  # call = "schedule": the windows it calls in ("Mo-Fr 22:00-06:00")
    schedule_mode: str = "demand"  # in a window: call on demand, or stay "connected"
    urgent_priority: int = 7  # a message of this priority or more calls outside the windows too

    @property
    def is_call(self) -> bool:
        """Through a modem: the line is up only during a call."""
        return bool(self.dial or self.answer)

    def char_time(self) -> float:
        """Seconds a byte takes on this line's wire."""
        return char_time(self.baud, self.bytesize, self.parity, self.stopbits)

    def port_settings(self) -> dict:
        """The serial port's settings, as pyserial names them."""
        return dict(baudrate=self.baud, bytesize=self.bytesize, parity=self.parity, stopbits=self.stopbits,
                    rtscts=self.rtscts, xonxoff=self.xonxoff)

    def check(self) -> None:
        _choice("protocol", self.protocol, ("async", "bsc"))
        _choice("parity", self.parity, ("N", "E", "O", "M", "S"))
        _choice("role", self.role, ("primary", "secondary"))
        _choice("code", self.code, ("ebcdic", "ascii"))
        _choice("bytesize", self.bytesize, (5, 6, 7, 8))
        _choice("stopbits", self.stopbits, (1, 1.5, 2))
        _range("window", self.window, 1, 127)
        _range("baud", self.baud, 50, 10_000_000)
        _range("block_size", self.block_size, 32, 65536)
        _range("frame_max", self.frame_max, 128, FRAME_MAX)
        _range("retry_limit", self.retry_limit, 1, 1000)
        for key in ("reply_timeout", "disconnect_timeout", "ttd_timeout", "keepalive", "backoff_max"):
            _range(key, getattr(self, key), 0.001, 1e6)
        _range("ack_hold", self.ack_hold, 0.0, 1.0)
        self._check_call()
        if self.secret_file:
            self.secret = _read_secret(self.secret_file)


    def _check_call(self) -> None:
        _choice("call", self.call, ("always", "demand", "schedule"))
        if self.call != "always" and not self.is_call:
            raise ConfigError(f'line to {self.peer}: call = "{self.call}" needs dial (this end calls) or answer = '
                              "true (it answers the peer's calls)")
        if (self.call == "schedule") != bool(self.schedule):
            raise ConfigError(f"line to {self.peer}: " + ('call = "schedule" needs schedule, its windows (e.g. '
                                                          '["Mo-Fr 22:00-06:00", "Sa-Su"])' if self.schedule == []
                                                          else 'schedule is for call = "schedule"'))
        for window in self.schedule:
            try:
                parse_window(window)
            except ScheduleError as e:
                raise ConfigError(f"line to {self.peer}: {e}") from None
        _choice("schedule_mode", self.schedule_mode, ("demand", "connected"))
        _range("urgent_priority", self.urgent_priority, 0, envelope.PRIORITY_MAX + 1)
        if not DIAL.fullmatch(self.dial):
            raise ConfigError(f"line to {self.peer}: dial = {self.dial!r}: digits, and , * # T P W - ( ) and "
                              "blanks only")
        for command in self.modem_init:
            if not command[:2].upper() == "AT" or any(c in command for c in "\r\n"):
                raise ConfigError(f"line to {self.peer}: modem_init {command!r} is not one AT command")
        if len(self.chat) % 2:
            raise ConfigError(f"line to {self.peer}: chat has {len(self.chat)} strings: it goes expect, send, "
                              "expect, send ... (an empty expect waits for nothing)")
        for expect in self.chat[::2]:
            _chat_wait(self.peer, expect)
        _range("idle_hangup", self.idle_hangup, 1.0, 1e6)
        _range("call_retry", self.call_retry, 1.0, 1e6)

    def chat_steps(self) -> list[tuple[str, str, float]]:
        """(expect, send, timeout) of each step of the chat."""
        waits = [_chat_wait(self.peer, e) for e in self.chat[::2]]
        return [(expect, send, wait) for (expect, wait), send in zip(waits, self.chat[1::2])]


DIAL = re.compile(r"[0-9,*#TPWtpw ()\-]*")  # (a Hayes modem passes over - ( ) and blanks)
CHAT_TIMEOUT = 30.0  # seconds a chat step waits for its text, unless it says (login:~10)


def _chat_wait(peer: str, expect: str) -> tuple[str, float]:
    text, sep, wait = expect.rpartition("~")
    if not sep:
        return expect, CHAT_TIMEOUT
    try:
        seconds = float(wait)
    except ValueError:
        raise ConfigError(f"line to {peer}: chat {expect!r}: what follows ~ is seconds to wait") from None
    if not 0 < seconds <= 3600:
        raise ConfigError(f"line to {peer}: chat {expect!r}: wait 0 to 3600 seconds")
    return text, seconds


def _read_secret(path: str) -> bytes:
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            secret = f.read().strip()
    except OSError as e:
        raise ConfigError(f"secret_file {path!r}: {e.strerror}") from None
    if st.st_mode & stat.S_IRWXO:
        raise ConfigError(f"secret_file {path!r} can be read by every user (mode {stat.filemode(st.st_mode)}): "
                          f"chmod o-rwx it")
    if len(secret) < SECRET_MIN:
        raise ConfigError(f"secret_file {path!r} holds {len(secret)} bytes; a secret needs at least {SECRET_MIN} "
                          "(e.g. head -c 32 /dev/urandom | base64 > FILE)")
    return secret


@dataclass
class ProcessConfig:
    """A `[[process]]`: a process name, who may attach under it, how much may wait for it, and
    what becomes of a message for it while no process is attached: it waits (`queue`), it is
    dropped (`discard`), or `start` runs a program that attaches and takes it."""
    name: str
    uid: int | str | None = None  # a user id or name
    gid: int | str | None = None  # a group id or name: its members may attach too
    max_waiting: int = 0  # messages on RECV_LIST for it at most; more wait on the sending side (0: no cap)
    start: str = ""  # a command line, run when a message waits and no process of the name is attached
    disposition: str = "queue"  # or "discard": a message that arrives while none is attached is returned
    backoff_max: float = 60.0  # longest wait before starting again a program that took no message
    accept_from: list = dataclasses.field(default_factory=list)  # hosts or process ids it takes messages from
    #                                                             ([]: anyone)

    def check(self) -> None:
        try:
            self.name = process_name(self.name).rstrip()
        except IdError as e:
            raise ConfigError(f"[[process]] name: {e}") from None
        if self.name == "MCCS":
            raise ConfigError("[[process]] name 'MCCS' is the daemon's own (its notices come from it)")
        _range(f"[[process]] {self.name!r} max_waiting", self.max_waiting, 0, 10_000_000)
        _choice("disposition", self.disposition, ("queue", "discard"))
        _range("backoff_max", self.backoff_max, 0.001, 1e6)
        for who in self.accept_from:
            try:
                check_host_id(who) if len(who) <= 2 else process_id(who)
            except IdError as e:
                raise ConfigError(f"[[process]] {self.name!r}: accept_from {who!r}: {e}") from None
        if self.start and self.disposition == "discard":
            raise ConfigError(f"[[process]] {self.name!r}: start and disposition = \"discard\" exclude each "
                              "other (a started program takes the message; discard drops it)")
        if self.start:
            try:
                if not shlex.split(self.start):
                    raise ValueError("empty")
            except ValueError as e:
                raise ConfigError(f"[[process]] {self.name!r}: start = {self.start!r} is not a command line: {e}") \
                    from None
        if isinstance(self.uid, str):
            try:
                self.uid = pwd.getpwnam(self.uid).pw_uid
            except KeyError:
                raise ConfigError(f"[[process]] {self.name!r}: uid {self.uid!r}: no such user") from None
        if isinstance(self.gid, str):
            try:
                self.gid = grp.getgrnam(self.gid).gr_gid
            except KeyError:
                raise ConfigError(f"[[process]] {self.name!r}: gid {self.gid!r}: no such group") from None

    def owner(self) -> str:
        return " or ".join(x for x in (self.uid is not None and f"uid {self.uid}",
                                       self.gid is not None and f"group {self.gid}") if x)


@dataclass
class RouteConfig:
    """A `[[route]]`: messages for host `to` (or "*", every host without a better route) go to `via`."""
    to: str
    via: str

    def check(self, host: str, peers: set[str]) -> None:
        if self.to != "*":
            try:
                check_host_id(self.to)
            except IdError as e:
                raise ConfigError(f"[[route]] to: {e}") from None
            if self.to == host:
                raise ConfigError(f"[[route]] to {self.to!r} is this host's own id")
        if self.via not in peers:
            raise ConfigError(f"[[route]] to {self.to!r}: via {self.via!r} is not the peer of a [[line]] "
                              f"(peers: {', '.join(sorted(peers)) or 'none'})")


#: Seconds a message that the next host cannot take (over its max_message, or large for an older
#: peer) holds up those behind it; then it is returned undeliverable and the rest go.
TOO_LARGE_WAIT = 300.0
SOCKET_PATH_MAX = 107  # bytes of sun_path on Linux, less its closing NUL


@dataclass
class HostConfig:
    id: str
    socket: str
    checkpoint: str
    trace_dir: str
    socket_group: str = ""
    synchronous: str = "full"
    trace_max_bytes: int = 64 * 1024 * 1024
    buffers: int = 1024
    max_message: int = 128
    strict_names: bool = False  # only [[process]] names may attach
    disk_reserve: int = 16 * 1024 * 1024  # below this many free bytes, new messages are refused
    routing: str = "auto"  # "auto": learn routes from the neighbours; "static": [[route]]s and neighbours only
    hop_limit: int = 64  # lines a message may cross (and a learned route's longest); more is returned as undeliverable
    ttl: float = 7 * 24 * 3600.0  # seconds a message may wait on the way before it is returned as undeliverable
    too_large_wait: float = TOO_LARGE_WAIT
    e2e: str = "off"  # "sign" or "seal": what this host does to the messages it originates (mccs.core.e2e)
    accept: str = "any"  # "signed": a message for this host must be protected end to end by a trusted origin
    host_key: str = ""  # this host's key file ("": <id>.key beside the config file)
    known_hosts: str = ""  # the hosts' keys it trusts ("": known_hosts beside the config file)
    e2e_gap_wait: float = 600.0  # seconds a stream waits for a message that came refused, before going on
    lines: list[LineConfig] = _internal(factory=list)
    routes: list[RouteConfig] = _internal(factory=list)
    processes: list[ProcessConfig] = _internal(factory=list)
    path: str = _internal("")  # the file this came from

    def check(self) -> None:
        try:
            check_host_id(self.id)
        except IdError as e:
            raise ConfigError(f"[host] id: {e}") from None
        _choice("synchronous", self.synchronous, ("full", "normal", "off"))
        _range("buffers", self.buffers, 1, 10_000_000)
        _range("max_message", self.max_message, 1, MAX_MESSAGE)
        _range("trace_max_bytes", self.trace_max_bytes, 4096, 1 << 40)
        _range("disk_reserve", self.disk_reserve, 0, 1 << 40)
        _choice("routing", self.routing, ("auto", "static"))
        _range("hop_limit", self.hop_limit, 1, 255)
        _range("ttl", self.ttl, 1, envelope.TTL_MAX / 10)
        _range("too_large_wait", self.too_large_wait, 1, envelope.TTL_MAX / 10)
        _choice("e2e", self.e2e, ("off", "sign", "seal"))
        _choice("accept", self.accept, ("any", "signed"))
        _range("e2e_gap_wait", self.e2e_gap_wait, 0, envelope.TTL_MAX / 10)
        if len(os.fsencode(self.socket)) > SOCKET_PATH_MAX:
            raise ConfigError(f"socket = {self.socket!r}: {len(os.fsencode(self.socket))} bytes long, and a Unix "
                              f"socket's path holds at most {SOCKET_PATH_MAX}: choose a shorter one")
        if self.socket_group:
            try:
                grp.getgrnam(self.socket_group)
            except KeyError:
                raise ConfigError(f"socket_group = {self.socket_group!r}: no such group") from None
        names = set()
        for proc in self.processes:
            proc.check()
            if proc.name in names:
                raise ConfigError(f"[[process]] name {proc.name!r} is configured twice")
            names.add(proc.name)
        peers = set()
        for line in self.lines:
            try:
                check_host_id(line.peer)
            except IdError as e:
                raise ConfigError(f"[[line]] peer: {e}") from None
            if line.peer == self.id:
                raise ConfigError(f"[[line]] peer {line.peer!r} is this host's own id")
            if line.peer in peers:
                raise ConfigError(f"[[line]] peer {line.peer!r} has more than one line")
            peers.add(line.peer)
            line.check()
        destinations = set()
        for route in self.routes:
            route.check(self.id, peers)
            if route.to in destinations:
                raise ConfigError(f"[[route]] to {route.to!r} is configured twice")
            destinations.add(route.to)

    def line_for(self, host: str) -> LineConfig | None:
        return next((line for line in self.lines if line.peer == host), None)


def _choice(key, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{key} = {value!r}: must be one of {', '.join(map(repr, allowed))}")


def _range(key, value, low, high) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigError(f"{key} = {value!r}: must be a number from {low} to {high}")


_PATH_KEYS = ("socket", "checkpoint", "trace_dir", "secret_file", "host_key", "known_hosts")


def _build(cls, table: dict, where: str, base: Path, extra: dict | None = None):
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    known = set(fields)
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    missing = [n for n, f in fields.items() if n in known and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING and n not in table]
    if missing:
        raise ConfigError(f"{where}: missing key {missing[0]!r}")
    values = dict(table)
    for key, value in values.items():
        default = fields[key].default
        want = (int, str) if default is None else type(default) if default is not dataclasses.MISSING \
            else list if fields[key].default_factory is not dataclasses.MISSING else str
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            values[key] = value = float(value)
        if not isinstance(value, want) or (want in (int, (int, str)) and isinstance(value, bool)):
            if not (key == "stopbits" and isinstance(value, (int, float))):
                raise ConfigError(f"{where}: {key} = {value!r}: expected {getattr(want, '__name__', 'int or str')}")
        if want is list and not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: {key} = {value!r}: expected a list of strings")
        if isinstance(value, str) and "\0" in value:
            raise ConfigError(f"{where}: {key} holds a NUL character")
        if key in _PATH_KEYS and value and "://" not in value:
            values[key] = str((base / os.path.expanduser(value)).resolve())
    return cls(**values, **(extra or {}))


def load(path: str | os.PathLike) -> HostConfig:
    """Read and check a host's TOML file; raises ConfigError naming the key and the reason."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}), as TOML must be") from None
    except RecursionError:
        raise ConfigError(f"{path}: arrays or tables nested too deeply") from None
    return from_dict(doc, path)


def from_dict(doc: dict, path: str | os.PathLike = "<config>") -> HostConfig:
    path = Path(path)
    base = path.parent.resolve()
    unknown = sorted(set(doc) - {"host", "line", "process", "route"})
    if unknown:
        raise ConfigError(f"{path}: unknown table {unknown[0]!r} (known: host, line, process, route)")
    if not isinstance(doc.get("host"), dict):
        raise ConfigError(f"{path}: missing [host] table")
    for key in ("line", "process", "route"):
        if not isinstance(doc.get(key, []), list) or not all(isinstance(t, dict) for t in doc.get(key, [])):
            raise ConfigError(f"{path}: {key} must be an array of tables ([[{key}]])")
    try:
        lines = [_build(LineConfig, t, f"{path} [[line]] #{i + 1}", base) for i, t in enumerate(doc.get("line", []))]
        for line in lines:  # a port is a device path relative to the config only if it looks like one
            if line.port.startswith("."):
                line.port = str((base / line.port).resolve())
        procs = [_build(ProcessConfig, t, f"{path} [[process]] #{i + 1}", base)
                 for i, t in enumerate(doc.get("process", []))]
        routes = [_build(RouteConfig, t, f"{path} [[route]] #{i + 1}", base)
                  for i, t in enumerate(doc.get("route", []))]
        host = _build(HostConfig, doc["host"], f"{path} [host]", base,
                      {"lines": lines, "processes": procs, "routes": routes, "path": str(path)})
        host.host_key = host.host_key or str(base / f"{host.id}.key")
        host.known_hosts = host.known_hosts or str(base / "known_hosts")
        host.check()
    except ConfigError as e:
        msg = str(e)
        raise ConfigError(msg if msg.startswith(str(path)) else f"{path}: {msg}") from None
    return host
