"""The host's key file and its trust file (docs/E2E.md): read into the core's Keyring for the
daemon, written by `mccs keys`.

The key file (`[host] host_key`, mode 0600) holds X25519 private keys, one a line, base64:

    current 8G0e5Yw5...=
    retired qJ2y0xYw...= until 1795000000

The trust file (`[host] known_hosts`) holds the public keys of the hosts this one trusts, one
`HOST KEY` line each, and keys replaced by `mccs keys trust --replace` with `until TIME`: messages
made with them may still be on their way until then.
"""
from __future__ import annotations

import base64
import binascii
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from linedrivers.ids import IdError, check_host_id

from mccs.config import ConfigError, HostConfig
from mccs.core.e2e import Keyring


class KeyFileError(ConfigError):
    """A key or trust file that cannot be used: what is wrong, and what to do."""


@dataclass
class Entry:
    """A line of either file: a host (own keys: "") and its key (private or public, raw), and
    until when a replaced one is still taken (0: the current one)."""
    host: str
    key: bytes
    until: float = 0.0


def encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def decode(text: str, where: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise KeyFileError(f"{where}: {text!r} is not a key (32 bytes in base64, as `mccs keys show` prints it)")
    return raw


def public_of(private: bytes) -> bytes:
    return X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()


def new_private() -> bytes:
    return X25519PrivateKey.generate().private_bytes_raw()


def _parse(path: Path, own: bool) -> list[Entry]:
    entries = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{path}:{n}"
        if len(words) not in (2, 4) or (len(words) == 4 and words[2] != "until") \
                or (own and words[0] not in ("current", "retired")):
            form = "current KEY, or retired KEY until TIME" if own else "HOST KEY, or HOST KEY until TIME"
            raise KeyFileError(f"{where}: expected {form}")
        try:
            until = float(words[3]) if len(words) == 4 else 0.0
        except ValueError:
            raise KeyFileError(f"{where}: until {words[3]!r} is not a time (seconds since 1970)") from None
        host = "" if own else words[0]
        if not own:
            try:
                check_host_id(host)
            except IdError as e:
                raise KeyFileError(f"{where}: {e}") from None
        entries.append(Entry(host, decode(words[1], where), until))
    return entries


def read_own(path: str | os.PathLike) -> list[Entry]:
    """This host's keys, the current one first; refused if others may read the file."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise KeyFileError(f"{path}: no key file (mccs keys init makes one)") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(f"{path}: the host key may be read by its group or others (mode {stat.S_IMODE(mode):04o}): "
                           f"chmod 600 {path}, and make a new key (mccs keys rotate) if it may have been copied")
    entries = _parse(path, own=True)
    current = [e for e in entries if not e.until]
    if len(current) != 1:
        raise KeyFileError(f"{path}: {len(current)} current keys; a key file has exactly one")
    return current + [e for e in entries if e.until]


def read_trusted(path: str | os.PathLike) -> list[Entry]:
    """The hosts' keys trusted here (none if there is no trust file yet)."""
    path = Path(path)
    if not path.exists():
        return []
    return _parse(path, own=False)


def _write(path: Path, text: str, private: bool) -> None:
    """Atomically (a crash leaves the old file or the new one), private files never readable by others."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_own(path: str | os.PathLike, entries: list[Entry]) -> None:
    lines = [f"current {encode(e.key)}" if not e.until else f"retired {encode(e.key)} until {e.until:.0f}"
             for e in entries]
    _write(Path(path), "# MCCS host key (X25519): keep it secret. `mccs keys show` prints its public half.\n"
           + "\n".join(lines) + "\n", private=True)


def write_trusted(path: str | os.PathLike, entries: list[Entry]) -> None:
    lines = [f"{e.host} {encode(e.key)}" + (f" until {e.until:.0f}" if e.until else "") for e in entries]
    _write(Path(path), "# Hosts whose messages this host verifies end to end: HOST KEY (mccs keys trust)\n"
           + "\n".join(lines) + "\n", private=False)


def keyring(cfg: HostConfig, now: float) -> Keyring:
    """The core's keys: this host's (if it has a key file; it must with e2e on) and the ones it trusts,
    but replaced keys whose time has passed."""
    own: list[Entry] = []
    if cfg.e2e != "off" or Path(cfg.host_key).exists():
        own = read_own(cfg.host_key)
    ring = Keyring(cfg.id, [X25519PrivateKey.from_private_bytes(e.key) for e in own if not e.until or e.until > now])
    for e in sorted(read_trusted(cfg.known_hosts), key=lambda e: bool(e.until)):  # each host's current key first
        if not e.until or e.until > now:
            ring.trusted.setdefault(e.host, []).append(e.key)
    return ring


def stamp(cfg: HostConfig) -> tuple:
    """Changes when either file does: the daemon reads them again (mccs keys while it runs)."""
    out: list[tuple[int, int, int] | None] = []
    for path in (cfg.host_key, cfg.known_hosts):
        try:
            st = os.stat(path)
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)
