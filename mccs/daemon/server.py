"""The process socket: a Unix domain socket on which processes make SEND and RECV requests.

One `Connection` per process. It frames and unframes, knows who is at the other end
(SO_PEERCRED), and keeps every client within bounds: at most MAX_OUTSTANDING requests without a
reply, and no reading while its replies are not being read (the transport's write buffer is
over its high-water mark). A client that pipelines requests or never reads simply stops being
read; its memory in the daemon stays bounded, and other processes are not slowed.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import grp
import logging
import os
import pwd
import socket
import struct
from collections import deque
from pathlib import Path
from typing import Iterable, Protocol

from mccs.client.ipc import Deframer, FrameError, frame
from mccs.core.replies import Refused
from mccs.core.requests import Code
from mccs.core.sessions import Creds

log = logging.getLogger("mccs.daemon.server")

MAX_OUTSTANDING = 64  # requests read from one connection and not yet answered
WRITE_HIGH = 1 << 20  # bytes of replies waiting for the client before we stop reading it
WRITE_ABORT = 64 << 20  # far over: the client is dropped
CREDS = struct.Struct("3i")  # struct ucred: pid, uid, gid



def peer_creds(pid: int, uid: int, gid: int) -> Creds:
    """The credentials of a process on the socket, with every group its user is a member of
    (what a `[[process]]` gid admits; the core reads no user database)."""
    try:
        groups = frozenset(os.getgrouplist(pwd.getpwuid(uid).pw_name, gid))
    except KeyError:  # a uid with no name: its own gid only
        groups = frozenset((gid,))
    return Creds(pid, uid, gid, groups)

class Owner(Protocol):
    """What the daemon does with a connection's traffic."""
    def connected(self, conn: "Connection") -> None: ...
    def request(self, conn: "Connection", obj: dict) -> None: ...
    def disconnected(self, conn: "Connection") -> None: ...
    def bad_frame(self, conn: "Connection", error: FrameError) -> None: ...


class Connection(asyncio.Protocol):
    def __init__(self, owner: Owner, conn_id: int, limit: int, bin_limit: int):
        self.owner = owner
        self.id = conn_id
        self.deframer = Deframer(limit, bin_limit)
        self.binary = False  # the client said "binary": true in its hello: large texts go as they are
        self.transport: asyncio.Transport | None = None
        self.creds: Creds | None = None
        self.closed = False
        self.outstanding = 0
        self._backlog: deque[dict | FrameError] = deque()
        self._write_paused = False
        self._read_paused = False
        self._serving = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        sock = transport.get_extra_info("socket")
        with contextlib.suppress(OSError, AttributeError):
            self.creds = peer_creds(*CREDS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, CREDS.size)))
        self.owner.connected(self)

    def data_received(self, data: bytes) -> None:
        try:
            self._backlog.extend(self.deframer.feed(data))
        except FrameError as e:  # over the size limit: the stream can no longer be trusted
            self.send(Refused(Code.BAD_REQUEST, str(e)).wire())  # no id: the stream is not read further
            assert self.transport is not None  # asyncio delivers data only after connection_made
            self.transport.close()
            return
        self._serve()

    def _serve(self) -> None:
        """Hand requests to the daemon while the client is within its bounds; else stop reading.
        A request answered at once (status, codec) calls back here through answer(): the loop
        already running goes on with the next, rather than one call deeper for each."""
        if self._serving:
            return
        self._serving = True
        try:
            while self._backlog and self.outstanding < MAX_OUTSTANDING and not self.closed:
                item = self._backlog.popleft()
                self.outstanding += 1
                if isinstance(item, FrameError):
                    self.owner.bad_frame(self, item)
                else:
                    self.owner.request(self, item)
        finally:
            self._serving = False
        self._flow()

    def _flow(self) -> None:
        pause = bool(self._backlog) or self.outstanding >= MAX_OUTSTANDING or self._write_paused
        if self.closed or pause == self._read_paused:
            return
        self._read_paused = pause
        assert self.transport is not None  # requests come, and writes pause, only after connection_made
        (self.transport.pause_reading if pause else self.transport.resume_reading)()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._flow()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._serve()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.owner.disconnected(self)

    def answer(self, body: dict, pieces: Iterable[bytes] = ()) -> None:
        """The reply to one of this connection's requests; `pieces`: an attachment, written as read."""
        self.outstanding -= 1
        self.send(body)
        for piece in pieces:
            self._write(piece)
        self._serve()

    def send(self, body: dict) -> None:
        try:
            data = frame(body, self.deframer.codec)
        except (TypeError, ValueError, OverflowError) as e:  # a value its codec cannot carry: this client only
            log.error("dropping a client: a reply %s cannot carry (%s)", self.deframer.codec, e)
            self.closed = True
            if self.transport is not None:
                self.transport.abort()
            return
        self._write(data)

    def use(self, codec: str) -> None:
        """Frames after this one are in `codec` both ways (the client waits for our answer)."""
        self.deframer.codec = codec

    def _write(self, data: bytes) -> None:
        if self.closed or self.transport is None:
            return
        self.transport.write(data)
        if self.transport.get_write_buffer_size() > WRITE_ABORT:
            log.warning("dropping a client that does not read its replies (%d bytes waiting)",
                        self.transport.get_write_buffer_size())
            self.transport.abort()


class SocketInUse(OSError):
    """Another daemon serves this socket path."""


def lock_socket(path: str, group: str) -> int:
    """One daemon per socket path: an flock on a side file, and no daemon answering there."""
    sock_path = Path(path)
    sock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o750 if group else 0o700)
    fd = os.open(f"{sock_path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SocketInUse(f"another MCCS daemon serves {path} (lock {path}.lock); "
                          "give this host its own socket") from None
    if answers(sock_path):
        os.close(fd)
        raise SocketInUse(f"a daemon answers on {path}; give this host its own socket")
    return fd


def answers(path: Path) -> bool:
    if not path.is_socket():
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


async def listen(owner: Owner, path: str, group: str, limit: int, bin_limit: int) -> asyncio.AbstractServer:
    """Bind the socket owner-only (0600), or 0660 for `group`, in a directory made if missing.
    Call lock_socket first: a socket file left here is then known to be stale."""
    sock_path = Path(path)
    sock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o750 if group else 0o700)
    if sock_path.exists() or sock_path.is_symlink():
        if not sock_path.is_socket():
            raise FileExistsError(f"{sock_path} exists and is not a socket; refusing to replace it")
        sock_path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(sock_path))
    finally:
        os.umask(old)
    if group:
        os.chown(sock_path, -1, grp.getgrnam(group).gr_gid)
        os.chmod(sock_path, 0o660)
    ids = iter(range(1, 1 << 62))
    loop = asyncio.get_running_loop()
    return await loop.create_unix_server(lambda: Connection(owner, next(ids), limit, bin_limit), sock=sock)
