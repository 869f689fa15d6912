"""The client library: what a process links with to SEND and RECV through its host's daemon.

It rides through daemon restarts: a request in flight is asked again after reconnecting (a SEND
with the same random request id, so it is stored once), and a message the daemon hands again
after a restart is recognised by its (origin, MSG_ID) key, confirmed and dropped.
"""
from __future__ import annotations

import json
import os
import socket
import stat
import struct
import time
import uuid
from dataclasses import dataclass

from linedrivers.ids import IdError, process_id

from .ipc import LENGTH, b64, frame, unb64

BLANK_ID = " " * 6


class MCCSError(Exception):
    """Base of the errors the library raises."""


class DaemonUnreachable(MCCSError):
    """No daemon answers on the socket (exit code 3 in the CLI)."""


class Refused(MCCSError):
    """The daemon refused the request: unknown host, invalid id, oversized message, bad request."""

    def __init__(self, message: str, code: str = "refused"):
        super().__init__(message)
        self.code = code


class NameInUse(Refused):
    """Another live connection holds this process name."""


@dataclass(frozen=True)
class Message:
    from_id: str
    to_id: str
    msg_id: int
    user_id: int
    data: bytes

    @property
    def key(self) -> tuple[str, int]:
        return (self.from_id[:2], self.msg_id)


def socket_path(path: str | os.PathLike) -> str:
    """`path` is the daemon's socket if it is a socket, else a config file naming the socket."""
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            return str(path)
    except FileNotFoundError:
        if str(path).endswith(".sock"):  # a daemon's socket, not there while it is down
            return str(path)
    from .config import load
    return load(path).socket


class Client:
    """A process's connection to its daemon, under one process name."""

    def __init__(self, path: str | os.PathLike, name: str, *, connect_timeout: float = 5.0,
                 reconnect_timeout: float = 60.0):
        self.path = socket_path(path)
        self.name = name
        self.reconnect_timeout = reconnect_timeout
        self.process_id: str | None = None
        self.host: str | None = None
        self.max_message = 128
        self._sock: socket.socket | None = None
        self._ids = iter(range(1, 1 << 62))
        self._pending_confirms: dict[int, tuple[str, int]] = {}  # confirm request id -> key
        # Keys returned to the caller whose confirm the daemon has not yet committed: only those
        # can be handed again (after a restart). Once committed the block is gone for good and a
        # later message may legitimately reuse the key (MSG_ID wrap, origin's checkpoint reset).
        self._seen_set: set[tuple[str, int]] = set()
        self._connect(connect_timeout)

    # -- connection -----------------------------------------------------------------------
    def _connect(self, budget: float) -> None:
        deadline, pause, last = time.monotonic() + budget, 0.02, None
        while True:
            try:
                self._open()
                return
            except NameInUse as e:
                last = e  # the daemon may not have seen our old connection close yet
            except (OSError, ConnectionError) as e:
                last = e
            if time.monotonic() + pause > deadline:
                if isinstance(last, NameInUse):
                    raise last
                raise DaemonUnreachable(f"no MCCS daemon answers on {self.path}: {last}") from None
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _open(self) -> None:
        self._drop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        reply = self._exchange({"op": "hello", "name": self.name})
        self.process_id, self.host = reply["process"], reply["host"]
        self.max_message = reply.get("max_message", 128)

    def _drop(self) -> None:
        if self._sock is not None:
            try:  # replies to our confirms may still be buffered: they tell which keys are settled
                self._sock.settimeout(0.2)
                while self._pending_confirms:
                    self._read()
            except (OSError, ConnectionError, ValueError, struct.error):
                pass
            self._sock.close()
            self._sock = None
        self._pending_confirms.clear()  # unknown outcome: those keys stay remembered

    def close(self) -> None:
        """Wait for the daemon to commit our confirms, then hang up."""
        if self._sock is not None:
            try:
                self._sock.settimeout(5.0)
                while self._pending_confirms:
                    self._read()
            except (OSError, ConnectionError, MCCSError):
                pass
            self._drop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests -------------------------------------------------------------------------
    def _write(self, obj: dict) -> int:
        obj["id"] = next(self._ids)
        self._sock.sendall(frame(obj))
        return obj["id"]

    def _read(self) -> dict:
        head = self._recv_exact(LENGTH.size)
        (n,) = LENGTH.unpack(head)
        reply = json.loads(self._recv_exact(n))
        key = self._pending_confirms.pop(reply.get("id"), None)
        if key is not None and reply.get("ok"):
            self._seen_set.discard(key)  # committed: it will never be handed again
        return reply

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            buf += chunk
        return bytes(buf)

    def _exchange(self, obj: dict) -> dict:
        """Send one request and read up to its reply (confirm replies on the way are consumed)."""
        rid = self._write(obj)
        while True:
            reply = self._read()
            if reply.get("id") == rid:
                break
        if not reply.get("ok"):
            code = reply.get("code", "refused")
            raise (NameInUse if code == "name_in_use" else Refused)(reply.get("error", "refused"), code)
        return reply

    def _call(self, make_request) -> dict:
        """A request that survives daemon restarts: asked again on a new connection."""
        deadline = None
        while True:
            try:
                if self._sock is None:
                    raise ConnectionError("not connected")
                return self._exchange(make_request())
            except (ConnectionError, OSError, struct.error) as e:
                if isinstance(e, socket.timeout):
                    raise
                deadline = deadline or time.monotonic() + self.reconnect_timeout
                self._connect(max(0.0, deadline - time.monotonic()))

    def send(self, to_id: str, data: bytes, user_id: int = 0) -> int:
        """SEND: returns the MSG_ID once the message is durable in the daemon's checkpoint."""
        try:
            to_id = process_id(to_id)
        except IdError as e:
            raise Refused(str(e), "bad_id") from None
        if len(data) > self.max_message:
            raise Refused(f"message of {len(data)} bytes is over the maximum of {self.max_message}", "too_large")
        req = uuid.uuid4().hex
        request = {"op": "send", "req": req, "to": to_id, "user_id": user_id, "data": b64(bytes(data))}
        return self._call(lambda: dict(request))["msg_id"]

    def recv(self, from_id: str = "", user_id: int = 0, wait: bool = True,
             timeout: float | None = None) -> Message | None:
        """RECV: the first message for this process matching FROM_ID and USER_ID, or None."""
        if from_id.strip():
            try:
                from_id = process_id(from_id)
            except IdError as e:
                raise Refused(str(e), "bad_id") from None
        deadline = None if timeout is None else time.monotonic() + timeout

        def request() -> dict:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            return {"op": "recv", "from": from_id, "user_id": user_id, "wait": wait, "timeout": left}
        while True:
            got = self._call(request).get("msg")
            if got is None:
                return None
            msg = Message(got["from_id"], got["to_id"], got["msg_id"], got["user_id"], unb64(got["data"]))
            fresh = msg.key not in self._seen_set
            self._seen_set.add(msg.key)
            try:
                self._pending_confirms[self._write({"op": "confirm", "rid": got["rid"]})] = msg.key
            except OSError:  # the daemon went away after handing it: it hands it again, we drop that copy
                self._drop()
            if fresh:
                return msg
            # handed again after a daemon restart: we returned it already; confirmed, dropped

    def status(self) -> dict:
        return self._call(lambda: {"op": "status"})["status"]


def connect(path: str | os.PathLike, name: str, **kwargs) -> Client:
    """`path` is the daemon's socket, or a host config file whose `socket` is used."""
    return Client(path, name, **kwargs)


# -- the paper's calling format -----------------------------------------------------------
_attached: Client | None = None


def attach(config: str | os.PathLike, name: str) -> Client:
    """Bind the module-level SEND and RECV to a daemon and a process name."""
    global _attached
    if _attached is not None:
        _attached.close()
    _attached = Client(config, name)
    return _attached


def _default() -> Client:
    if _attached is None:
        config, name = os.environ.get("MCCS_CONFIG"), os.environ.get("MCCS_NAME")
        if not config or not name:
            raise MCCSError("call mccs.attach(config, name) or set MCCS_CONFIG and MCCS_NAME")
        attach(config, name)
    return _attached


def SEND(to_id: str, message: bytes, user_id: int = 0) -> tuple[str, int]:
    """CALL SEND(TO_ID, MESSAGE, MSG_ID, USER_ID): a refused TO_ID comes back blank, MSG_ID 0."""
    client = _default()
    try:
        return process_id(to_id), client.send(to_id, message, user_id)
    except Refused as e:
        if e.code in ("unknown_host", "bad_id"):
            return BLANK_ID, 0
        raise


def RECV(from_id: str = "", user_id: int = 0, status: int = 0) -> tuple[str, bytes, int, int]:
    """CALL RECV(FROM_ID, MESSAGE, MSG_ID, USER_ID, STATUS): STATUS 0 waits; nothing found is a blank FROM_ID."""
    msg = _default().recv(from_id, user_id, wait=(status == 0))
    if msg is None:
        return BLANK_ID, b"", 0, 0
    return msg.from_id, msg.data, msg.msg_id, msg.user_id
