"""Conventions of the long-running commands (`mccs daemon`, `mccs vserial`, `mccs loopback`) as
services: SIGTERM stops them as Ctrl-C does (exit 0), and the daemon tells a service manager
when it is ready (sd_notify(3), for a systemd unit of Type=notify; docs/SERVICE.md). Logs go to
stderr, where the journal (or any supervisor) keeps them with their time and unit."""
from __future__ import annotations

import logging
import os
import signal
import socket

log = logging.getLogger("mccs.daemon.service")


#: syslog priorities, which journald reads from a "<N>" at the start of a line on a service's stderr
PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class JournalFormatter(logging.Formatter):
    """Under systemd: the priority prefix instead of our own time stamp (the journal has its own)."""

    def format(self, record: logging.LogRecord) -> str:
        return f"<{PRIORITY.get(record.levelno, 6)}>{super().format(record)}"


def configure_logging(level: int) -> None:
    """Log lines go to stderr: on a terminal with their time; into the journal (systemd sets
    $JOURNAL_STREAM) with their priority, so `journalctl -p warning` picks out the warnings."""
    handler = logging.StreamHandler()
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(JournalFormatter("%(name)s %(levelname)s %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """SIGTERM raises KeyboardInterrupt in the main thread: the command stops as after Ctrl-C,
    through its own clean-up. (The daemon's asyncio loop handles both signals itself.)"""
    signal.signal(signal.SIGTERM, _interrupt)


def notify(state: str) -> bool:
    """Send `state` (e.g. "READY=1") to the service manager's $NOTIFY_SOCKET, if it gave one: a
    datagram on a Unix socket, "@" naming the abstract namespace. False when there is none or it
    cannot be reached (logged: the service runs on, the manager decides)."""
    path = os.environ.get("NOTIFY_SOCKET", "")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.sendto(state.encode(), address)
        return True
    except OSError as e:
        log.warning("cannot notify the service manager at %s: %s", path, e)
        return False
