"""Host configuration from TOML (DESIGN.md section 8): every timer and limit is a key.

Relative paths are relative to the config file; an unknown key is an error that names it.
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from linedrivers.ids import IdError, check_host_id


class ConfigError(ValueError):
    """A bad configuration: the message names the file, the key and the reason."""


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
    xonxoff_safe: bool = False
    reply_timeout: float = 3.0
    retry_limit: int = 7
    disconnect_timeout: float = 20.0
    ttd_timeout: float = 2.0
    keepalive: float = 30.0
    backoff_max: float = 60.0

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
        _range("retry_limit", self.retry_limit, 1, 1000)
        for key in ("reply_timeout", "disconnect_timeout", "ttd_timeout", "keepalive", "backoff_max"):
            _range(key, getattr(self, key), 0.001, 1e6)


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
    lines: list[LineConfig] = field(default_factory=list)
    path: str = ""  # the file this came from

    def check(self) -> None:
        try:
            check_host_id(self.id)
        except IdError as e:
            raise ConfigError(f"[host] id: {e}") from None
        _choice("synchronous", self.synchronous, ("full", "normal", "off"))
        _range("buffers", self.buffers, 1, 10_000_000)
        _range("max_message", self.max_message, 1, 65535)
        _range("trace_max_bytes", self.trace_max_bytes, 4096, 1 << 40)
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

    def line_for(self, host: str) -> LineConfig | None:
        return next((line for line in self.lines if line.peer == host), None)


def _choice(key, value, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{key} = {value!r}: must be one of {', '.join(map(repr, allowed))}")


def _range(key, value, low, high) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigError(f"{key} = {value!r}: must be a number from {low} to {high}")


_PATH_KEYS = ("socket", "checkpoint", "trace_dir")


def _build(cls, table: dict, where: str, base: Path, extra: dict | None = None):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    known = set(fields) - {"lines", "path"}
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
        want = type(default) if default is not dataclasses.MISSING else str
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            values[key] = value = float(value)
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            if not (key == "stopbits" and isinstance(value, (int, float))):
                raise ConfigError(f"{where}: {key} = {value!r}: expected {want.__name__}")
        if key in _PATH_KEYS and "://" not in value:
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
    return from_dict(doc, path)


def from_dict(doc: dict, path: str | os.PathLike = "<config>") -> HostConfig:
    path = Path(path)
    base = path.parent.resolve()
    unknown = sorted(set(doc) - {"host", "line"})
    if unknown:
        raise ConfigError(f"{path}: unknown table {unknown[0]!r} (known: host, line)")
    if not isinstance(doc.get("host"), dict):
        raise ConfigError(f"{path}: missing [host] table")
    lines_doc = doc.get("line", [])
    if not isinstance(lines_doc, list):
        raise ConfigError(f"{path}: line must be an array of tables ([[line]])")
    try:
        lines = [_build(LineConfig, t, f"{path} [[line]] #{i + 1}", base, None) for i, t in enumerate(lines_doc)]
        for line in lines:  # a port is a device path relative to the config only if it looks like one
            if line.port.startswith("."):
                line.port = str((base / line.port).resolve())
        host = _build(HostConfig, doc["host"], f"{path} [host]", base, {"lines": lines, "path": str(path)})
        host.check()
    except ConfigError as e:
        msg = str(e)
        raise ConfigError(msg if msg.startswith(str(path)) else f"{path}: {msg}") from None
    return host
