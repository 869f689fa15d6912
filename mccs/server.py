"""The process socket: a Unix domain socket on which processes make SEND and RECV requests.

One `Connection` per process. It only frames and unframes; the daemon decides. A request that
cannot be read gets an error reply; a frame over the size limit closes the connection, since
the stream can no longer be trusted. Other processes are not affected either way.
"""
from __future__ import annotations

import asyncio
import contextlib
import grp
import logging
import os
import socket
from pathlib import Path

from .ipc import Deframer, FrameError, frame

log = logging.getLogger("mccs.server")


class Connection(asyncio.Protocol):
    def __init__(self, daemon, limit: int):
        self.daemon = daemon
        self.deframer = Deframer(limit)
        self.transport: asyncio.Transport | None = None
        self.name: str | None = None  # the process id this connection holds, once it said hello
        self.handed: dict[int, object] = {}  # RECV_LIST MSGBLOKs handed out, confirm awaited, by seq
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            requests = self.deframer.feed(data)
        except FrameError as e:
            self.daemon.counters["bad_requests"] += 1
            self.reply({"ok": False, "error": str(e), "code": "bad_request"})
            self.transport.close()
            return
        for req in requests:
            if isinstance(req, FrameError):
                self.daemon.counters["bad_requests"] += 1
                self.reply({"ok": False, "error": str(req), "code": "bad_request"})
            else:
                self.daemon.request(self, req)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.daemon.disconnected(self)

    def reply(self, obj: dict) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(frame(obj))


async def listen(daemon, path: str, group: str, limit: int) -> asyncio.AbstractServer:
    """Bind the socket owner-only (0600), or 0660 for `group`, in a directory made if missing."""
    sock_path = Path(path)
    sock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o750 if group else 0o700)
    _remove_stale(sock_path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(sock_path))
    finally:
        os.umask(old)
    if group:
        os.chown(sock_path, -1, grp.getgrnam(group).gr_gid)
        os.chmod(sock_path, 0o660)
    loop = asyncio.get_running_loop()
    return await loop.create_unix_server(lambda: Connection(daemon, limit), sock=sock)


def _remove_stale(path: Path) -> None:
    """A socket file left by a daemon that died; the checkpoint lock already proved none runs."""
    if path.exists() or path.is_symlink():
        if not path.is_socket():
            raise FileExistsError(f"{path} exists and is not a socket; refusing to replace it")
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
