"""MCCS identifiers: 2-character host ids and 6-character process ids (docs/DESIGN.md section 2)."""
from __future__ import annotations

import functools


class IdError(ValueError):
    """An id that breaks the rules of docs/DESIGN.md section 2."""


def _printable(text: str, blanks: bool = False) -> bool:
    """Printable ASCII (33-126), and blanks too if `blanks`; str's own tests, as every SEND checks one."""
    return text.isascii() and text.isprintable() and (blanks or " " not in text)


def check_host_id(host: str) -> str:
    """Return `host` if it is two printable ASCII characters with no blank."""
    if not isinstance(host, str) or len(host) != 2 or not _printable(host):
        raise IdError(f"invalid host id {host!r}: need 2 printable ASCII characters, no blank")
    return host


def process_id(pid: str) -> str:
    """Blank-pad a process id to 6 characters and check it (`"AAR7"` -> `"AAR7  "`)."""
    if not isinstance(pid, str):
        raise IdError(f"invalid process id {pid!r}")
    return _process_id(pid)


@functools.lru_cache(maxsize=4096)  # every image names two, and a host sees few: each is checked once
def _process_id(pid: str) -> str:
    if len(pid) > 6 or len(pid) < 3:
        raise IdError(f"invalid process id {pid!r}: need a host id and a name of 1-4 characters")
    check_host_id(pid[:2])
    name = pid[2:].ljust(4)
    if not name.strip() or not _printable(name, blanks=True):
        raise IdError(f"invalid process id {pid!r}: the name needs 1-4 printable characters")
    return pid[:2] + name


def process_name(name: str) -> str:
    """Check a process name of 1-4 printable characters (blanks inside allowed) and pad it to 4."""
    if not isinstance(name, str) or not 1 <= len(name.rstrip()) <= 4:
        raise IdError(f"invalid process name {name!r}: need 1-4 printable characters")
    name = name.rstrip().ljust(4)
    if not name.strip() or not _printable(name, blanks=True):
        raise IdError(f"invalid process name {name!r}: need 1-4 printable characters")
    return name


def host_of(pid: str) -> str:
    return pid[:2]


def check_epoch(epoch: str) -> str:
    """Return a checkpoint epoch as sign-ons carry it (EPOCH=): 1 to 16 lower-case hex digits, or ""
    for none. Raises IdError."""
    if len(epoch) > 16 or not all(c in "0123456789abcdef" for c in epoch):
        raise IdError(f"invalid epoch {epoch!r}: need 1-16 lower-case hex digits")
    return epoch
