"""The client library: what a process links with to SEND and RECV through its host's daemon.

It rides through daemon restarts: a request in flight is asked again after reconnecting (a SEND
with the same random request id, so it is stored once), and a message the daemon hands again
after a restart is recognised by its key and dropped. It never hangs on a daemon that stopped
answering (SIGSTOP, a wedged machine): a request the daemon answers at once must be answered
within `grace` seconds, and while a request waits (a SEND for a buffer, a RECV with a timeout)
the library pings the daemon and gives up, DaemonUnreachable, when the ping is not answered.
"""
from __future__ import annotations

import atexit
import os
import socket
import stat
import time
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterable

from linedrivers.ids import IdError, host_of, process_id

from mccs.client.ipc import LENGTH, b64, frame, unb64, unframe
from mccs.core.requests import BATCH_BYTES, BATCH_MAX, CODECS, Code

BLANK_ID = " " * 6
GRACE = 5.0  # seconds the daemon has to answer what it can answer at once
CHUNK = 256 << 10  # a large text is written in pieces this big (progress is told after each)


class MCCSError(Exception):
    """Base of the errors the library raises."""


class DaemonUnreachable(MCCSError):
    """No daemon answers on the socket (exit code 3 in the CLI)."""


class Refused(MCCSError):
    """The daemon refused the request: unknown host, invalid id, oversized message, bad request."""

    def __init__(self, message: str, code: str = Code.REFUSED):
        super().__init__(message)
        self.code = code  # a requests.Code (compare with one); a code this library does not know stays a str


class NotStored(Refused):
    """Nothing was stored, for now: the daemon's disk is full (`disk_full`), or a SEND's timeout
    passed while it waited for a buffer (`timeout`). Try again later (exit code 4 in the CLI)."""


@dataclass(frozen=True)
class Message:
    from_id: str
    to_id: str
    msg_id: int
    user_id: int
    data: bytes
    reply: bool = False  # the reply to a request of ours (USER_ID = its MSG_ID)
    ok: bool = True  # a reply's outcome (reply(..., ok=False) made it False)
    copy: bool = False  # a copy for an observer of TO_ID: its handler gets the message itself
    deadline: float | None = field(default=None, compare=False)  # monotonic: when its sender stops waiting
    e2e: str = "none"  # how it came: "signed" or "sealed" end to end by its origin host, or "none"

    @property
    def key(self) -> tuple[str, int]:
        return (host_of(self.from_id), self.msg_id)


@dataclass(frozen=True)
class Pong:
    """A ping's answer: the host whose daemon answered, the round trip in seconds, and whether a
    process of the name asked is attached there (None: no name asked)."""
    host: str
    rtt: float
    attached: bool | None = None


def socket_path(path: str | os.PathLike) -> str:
    """`path` is the daemon's socket if it is a socket, else a config file naming the socket."""
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            return str(path)
    except FileNotFoundError:
        if str(path).endswith(".sock"):  # a daemon's socket, not there while it is down
            return str(path)
    from mccs.config import load
    return load(path).socket


class _Deadline(Exception):
    """The caller's own deadline passed (not the daemon's fault)."""


class Client:
    """A process's connection to its daemon, under one process name (None: administration only)."""

    def __init__(self, path: str | os.PathLike, name: str | None, *, observe: bool = False,
                 connect_timeout: float = 5.0, reconnect_timeout: float = 60.0, grace: float = GRACE,
                 codec: str = "msgpack", carry_confirms: bool = False):
        """`codec`: the frames' encoding wanted, used when the daemon offers it (ipc); else JSON.
        `carry_confirms`: a message received is confirmed by the next request (a RECV carries it),
        one request fewer a message; a process that dies before its next request gets its last
        messages again. By default each is confirmed as recv() returns it, as before."""
        self.path = socket_path(path)
        self.name = name
        self.observer = observe  # attached as an observer of `name`, not a handler
        self.observing: list[str] = []  # other names observed (observe()), asked again after a reconnect
        self.reconnect_timeout = reconnect_timeout
        self.grace = grace
        self.process_id: str | None = None
        self.host: str | None = None
        self.max_message = 128
        self.binary = False  # the daemon takes and gives large texts as they are after the JSON (ipc)
        self.carry = False  # the daemon takes a confirm in the next RECV (and send_many): protocol v4
        self.carry_confirms = carry_confirms
        self.wanted = codec
        self.codec = "json"  # frames' bodies now
        self._sock: socket.socket | None = None
        self._rbuf = bytearray()
        self._ids = iter(range(1, 1 << 62))
        self._pending_confirms: dict[int, tuple] = {}  # confirm request id -> handed key
        self._unconfirmed: list[tuple[int, tuple]] = []  # (rid, handed key) to confirm with the next request
        # Messages returned to the caller whose confirm the daemon has not yet committed: only those
        # can be handed again (after a restart), with the same key and the daemon's same rid.
        self._seen_set: set[tuple] = set()
        self._connect(connect_timeout)
        _open_clients.add(self)  # closed at exit: the last messages' confirms are not left behind

    # -- connection -----------------------------------------------------------------------
    def _connect(self, budget: float) -> None:
        deadline, pause, last = time.monotonic() + budget, 0.02, None
        while True:
            try:
                self._open()
                return
            except (OSError, ConnectionError) as e:
                last = e
            if time.monotonic() + pause > deadline:
                raise DaemonUnreachable(f"no MCCS daemon answers on {self.path}: {last}") from None
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _open(self) -> None:
        self._drop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.grace)
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.codec = "json"
        if self.name is not None:
            reply = self._exchange({"op": "hello", "name": self.name, "binary": True, "observe": self.observer})
            self.process_id, self.host = reply["process"], reply["host"]
            self.max_message = reply.get("max_message", 128)
            self.binary = reply.get("v", 2) >= 3
            self.carry = reply.get("v", 2) >= 4
            if self.wanted != "json" and self.wanted in CODECS and self.wanted in reply.get("codecs", ()):
                self._exchange({"op": "codec", "name": self.wanted})
                self.codec = self.wanted
            for name in self.observing:
                self._exchange({"op": "observe", "name": name})

    def _drop(self) -> None:
        if self._sock is not None:
            try:  # replies to our confirms may still be buffered: they tell which messages are settled
                while self._pending_confirms and self._read(0.2) is not None:
                    pass
            except (OSError, ConnectionError, ValueError):
                pass
            self._sock.close()
            self._sock = None
        self._rbuf.clear()
        self._pending_confirms.clear()  # unknown outcome: those messages stay remembered
        self._unconfirmed.clear()  # the daemon hands them again; we drop those copies and confirm them

    def give_back(self) -> None:
        """Hang up without confirming the messages returned and not yet confirmed (`carry_confirms`):
        they stay on RECV_LIST, and the daemon hands them again (to the next handler of the name).
        For a caller that could not keep what it received (its output failed)."""
        self._unconfirmed.clear()
        self._drop()

    def close(self) -> None:
        """Wait for the daemon to commit our confirms, then hang up."""
        if self._sock is not None:
            try:
                self._confirm_now()
                deadline = time.monotonic() + self.grace
                while self._pending_confirms and time.monotonic() < deadline:
                    self._read(deadline - time.monotonic())
            except (OSError, ConnectionError, ValueError):
                pass
            self._drop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- framing --------------------------------------------------------------------------
    def _write(self, obj: dict) -> int:
        """Send a request; its `_att` (data, and a progress callback) goes after it as it is."""
        assert self._sock is not None  # requests go only on a connection (_call, _open)
        obj["id"] = next(self._ids)
        att = obj.pop("_att", None)
        self._sock.settimeout(self.grace)
        if att is None:
            self._sock.sendall(frame(obj, self.codec))
            return obj["id"]
        data, progress = att
        self._sock.sendall(frame({**obj, "bin": len(data)}, self.codec))
        view = memoryview(data)
        for offset in range(0, len(data), CHUNK):
            self._sock.sendall(view[offset:offset + CHUNK])
            if progress is not None:
                progress(min(offset + CHUNK, len(data)), len(data))
        return obj["id"]

    def _read(self, timeout: float | None) -> dict | None:
        """The next reply, or None when `timeout` seconds pass first (the stream stays intact)."""
        assert self._sock is not None  # replies are read only on a connection
        end = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while True:
            reply = self._reply()
            if reply is not None:
                rid = reply.get("id")
                key = self._pending_confirms.pop(rid, None) if isinstance(rid, int) else None
                if key is not None and reply.get("ok"):
                    self._seen_set.discard(key)  # committed: it will never be handed again
                return reply
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return None
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(65536)
            except socket.timeout:
                return None
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            self._rbuf += chunk

    def _reply(self) -> dict | None:
        """A whole reply from the buffer (with its attachment, in `bin`), or None yet."""
        if len(self._rbuf) < LENGTH.size:
            return None
        (n,) = LENGTH.unpack_from(self._rbuf)
        end = LENGTH.size + n
        if len(self._rbuf) < end:
            return None
        reply = unframe(bytes(self._rbuf[LENGTH.size:end]), self.codec)
        extra = reply.get("bin") if type(reply.get("bin")) is int else None
        if extra is not None:
            if len(self._rbuf) < end + extra:
                return None
            reply["bin"] = bytes(memoryview(self._rbuf)[end:end + extra])
            end += extra
        del self._rbuf[:end]
        return reply

    def _exchange(self, obj: dict, deadline: float | None = None, wait: str = "prompt") -> dict:
        """Send one request and read up to its reply (confirm replies on the way are consumed).

        `wait` says how long the daemon may take: "prompt", it answers within `grace`; "patient",
        the request may wait in the daemon, which answers pings meanwhile; "forever", no limit (a
        RECV that waits rides through a stopped daemon as through a restart). `deadline` is the
        caller's own limit (_Deadline)."""
        rid = self._write(obj)
        ping, heard = None, time.monotonic()
        while True:
            limits = [] if wait == "forever" else [heard + self.grace]
            if deadline is not None:
                limits.append(deadline)
            reply = self._read(min(limits) - time.monotonic() if limits else None)
            now = time.monotonic()
            if reply is None:
                if deadline is not None and now >= deadline:
                    raise _Deadline()
                if wait == "patient" and ping is None:
                    ping, heard = self._write({"op": "ping"}), now
                    continue
                raise DaemonUnreachable(f"the MCCS daemon on {self.path} does not answer "
                                        f"(for {self.grace:g} s; stopped or overloaded?)")
            heard = now
            if reply.get("id") == ping:
                ping = None
            elif reply.get("id") == rid:
                break
        if not reply.get("ok"):
            code = reply.get("code", Code.REFUSED)
            cls = NotStored if code == Code.DISK_FULL else Refused
            raise cls(reply.get("error", "refused"), code)
        return reply

    def _call(self, make_request, deadline: float | None = None, wait: str = "prompt") -> dict:
        """A request that survives daemon restarts: asked again on a new connection."""
        reconnect_by = None
        while True:
            try:
                if self._sock is None:
                    raise ConnectionError("not connected")
                request = make_request()
                if "confirm" not in request:
                    self._confirm_now()
                return self._exchange(request, deadline, wait)
            except (ConnectionError, OSError):
                now = time.monotonic()
                reconnect_by = reconnect_by or now + self.reconnect_timeout
                if now >= reconnect_by or (deadline is not None and now >= deadline):  # it answers, then hangs up
                    raise DaemonUnreachable(f"the MCCS daemon on {self.path} keeps closing the connection before "
                                            f"it answers (for {self.reconnect_timeout:g} s): see its log") from None
                self._connect(max(0.0, reconnect_by - now))

    def _data(self, data: bytes) -> bytes | str:
        """A message's data in a request: as it is in MessagePack, in base64 in JSON."""
        return bytes(data) if self.codec == "msgpack" else b64(bytes(data))

    def _confirm_now(self) -> None:
        """The confirms not yet carried, on their own (pipelined: their replies are read on the way)."""
        while self._unconfirmed:
            rid, handed = self._unconfirmed.pop(0)
            self._pending_confirms[self._write({"op": "confirm", "rid": rid})] = handed

    # -- the primitives ---------------------------------------------------------------------
    def send(self, to_id: str, data: bytes, user_id: int = 0, timeout: float | None = None, *,
             ttl: float | None = None, receipt: bool = False, priority: int = 0,
             progress: Callable[[int, int], None] | None = None) -> int:
        """SEND: returns the MSG_ID once the message is durable in the daemon's checkpoint. It may
        wait for a buffer; with `timeout`, a SEND not stored by then is taken back (NotStored).
        `ttl`: seconds it may wait on the way (default: the host's `ttl`), after which an
        undeliverable notice comes back; `receipt`: a delivered notice once its process took it.
        Notices are messages from the daemon's process MCCS (docs/MESSAGING.md, routing). `progress(done,
        total)` is called as a large message is handed to the daemon. `priority` 0 to 7: a waiting
        message of higher priority goes first on every line and to an unselective RECV."""
        return self._send(to_id, data, user_id, timeout, progress, ttl=ttl, receipt=receipt or None,
                          priority=priority or None)

    def _send(self, to_id: str, data: bytes, user_id: int, timeout: float | None,
              progress: Callable[[int, int], None] | None, **keys) -> int:
        """SEND with the request's optional `keys` (those not None)."""
        try:
            to_id = process_id(to_id)
        except IdError as e:
            raise Refused(str(e), Code.BAD_ID) from None
        if len(data) > self.max_message:
            raise Refused(f"message of {len(data)} bytes is over the maximum of {self.max_message}", Code.TOO_LARGE)
        req = uuid.uuid4().hex
        request = {"op": "send", "req": req, "to": to_id, "user_id": user_id,
                   **{k: v for k, v in keys.items() if v is not None}}

        def make() -> dict:  # as it is after the request, if the daemon takes that (asked again after a restart)
            big = self.binary and len(data) > CHUNK // 16
            return {**request, "_att": (data, progress)} if big else {**request, "data": self._data(data)}
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            return self._call(make, deadline, "patient")["msg_id"]
        except _Deadline:
            reply = self._call(lambda: {"op": "cancel", "req": req})
            if reply.get("msg_id") is not None:  # stored just before the cancel
                return reply["msg_id"]
            raise NotStored(f"not stored within {timeout:g} s (the daemon's buffers are full); nothing was sent",
                            Code.TIMEOUT) from None

    def send_many(self, messages: Iterable[tuple], *, ttl: float | None = None, receipt: bool = False,
                  priority: int = 0) -> list[int]:
        """SEND of many messages in one request, durable as a whole: their MSG_IDs, in order, once
        all are stored in one commit; or an error and none is stored. Each message is (TO_ID, data)
        or (TO_ID, data, USER_ID); the keywords are as for send() and hold for all. A batch has at
        most BATCH_MAX messages of BATCH_BYTES in all, and waits until the daemon has room for all."""
        messages, entries = list(messages), []
        for i, (to_id, data, *user_id) in enumerate(messages):
            try:
                to_id = process_id(to_id)
            except IdError as e:
                raise Refused(f"message {i}: {e}", Code.BAD_ID) from None
            if len(data) > self.max_message:
                raise Refused(f"message {i}: {len(data)} bytes is over the maximum of {self.max_message}",
                              Code.TOO_LARGE)
            entries.append({"to": to_id, "data": self._data(data), "user_id": user_id[0] if user_id else 0,
                            **({"ttl": ttl} if ttl is not None else {}), **({"receipt": True} if receipt else {}),
                            **({"priority": priority} if priority else {})})
        if not entries:
            return []
        if len(entries) > BATCH_MAX or sum(len(m[1]) for m in messages) > BATCH_BYTES:
            raise Refused(f"a batch is at most {BATCH_MAX} messages of {BATCH_BYTES} bytes in all", Code.TOO_LARGE)
        if not self.carry:
            raise Refused(f"the MCCS daemon on {self.path} is older: it does not take send_many", Code.BAD_REQUEST)
        request = {"op": "send_many", "req": uuid.uuid4().hex, "msgs": entries}
        return self._call(lambda: dict(request), None, "patient")["msg_ids"]

    def recv(self, from_id: str = "", user_id: int = 0, wait: bool = True,
             timeout: float | None = None, *, reply_to: int = 0) -> Message | None:
        """RECV: the first message for this process matching FROM_ID and USER_ID, or None; or a
        copy, for an observer (`copy`); with `reply_to`, only the reply to our request of that
        MSG_ID (replies are taken no other way). The message is confirmed (taken off RECV_LIST) as
        it is returned, or, with `carry_confirms`, by the next request or close()."""
        if from_id.strip():
            try:
                from_id = process_id(from_id)
            except IdError as e:
                raise Refused(str(e), Code.BAD_ID) from None
        msgs = self._recv({"from": from_id, "user_id": user_id, **({"reply_to": reply_to} if reply_to else {})},
                          wait, timeout)
        return msgs[0] if msgs else None

    def recv_many(self, n: int, wait: bool = True, timeout: float | None = None) -> list[Message]:
        """RECV of up to `n` messages at once, the first ones for this process, in the order recv()
        would return them: at least one, or [] as recv() returns None. Confirmed as recv()'s are."""
        if not 1 <= n <= BATCH_MAX:
            raise Refused(f"recv_many takes 1 to {BATCH_MAX} messages, not {n}", Code.BAD_REQUEST)
        return self._recv({"max": n} if n > 1 and self.carry else {}, wait, timeout)

    def _recv(self, selection: dict, wait: bool, timeout: float | None) -> list[Message]:
        until = None if timeout is None else time.monotonic() + timeout

        def request() -> dict:
            left = None if until is None else max(0.0, until - time.monotonic())
            rids = [rid for rid, _ in self._unconfirmed]
            carried = {"confirm": rids[0] if len(rids) == 1 else rids} if rids else {}
            return {"op": "recv", **selection, "wait": wait, "timeout": left, **carried}
        mode = "prompt" if not wait else "forever" if until is None else "patient"
        deadline = None if until is None or not wait else until + self.grace
        while True:
            try:
                reply = self._call(request, deadline, mode)
            except _Deadline:
                raise DaemonUnreachable(f"the MCCS daemon on {self.path} did not answer a RECV by its timeout") \
                    from None
            for _, handed in self._unconfirmed:  # carried, and committed before this reply
                self._seen_set.discard(handed)
            self._unconfirmed.clear()
            if reply.get("msg") is None:
                return []
            msgs = [self._message(got, reply.get("bin") if i == 0 else None)
                    for i, got in enumerate([reply["msg"], *reply.get("more", ())])]
            if not (self.carry and self.carry_confirms):  # the confirms go now, on their own (pipelined)
                try:
                    self._confirm_now()
                except OSError:  # the daemon went away after handing it: it hands it again, we drop that copy
                    self._drop()
            fresh = [msg for msg in msgs if msg is not None]
            if fresh:
                return fresh
            # each was handed again after a daemon restart: we returned it already; confirmed, dropped

    def _message(self, got: dict, data: bytes | None) -> Message | None:
        """A message handed, to be confirmed with the next request; None if we returned it already
        (handed again after a daemon restart)."""
        ttl = got.get("ttl")
        msg = Message(got["from_id"], got["to_id"], got["msg_id"], got["user_id"],
                      unb64(got["data"]) if data is None else data, got.get("reply", False), got.get("ok", True),
                      got.get("copy", False), None if ttl is None else time.monotonic() + ttl, got.get("e2e", "none"))
        if msg.copy:  # at most once: nothing to confirm, never handed again
            return msg
        handed = (*msg.key, got["rid"])
        fresh = handed not in self._seen_set
        self._seen_set.add(handed)
        self._unconfirmed.append((got["rid"], handed))
        return msg if fresh else None

    # -- services ---------------------------------------------------------------------------------
    def observe(self, name: str) -> None:
        """Copies of the messages that arrive for process `name` of this host from now on, at
        most once each, returned by recv() with `copy` set (its handler gets each message itself)."""
        self._call(lambda: {"op": "observe", "name": name})
        self.observing.append(name)

    def request(self, to_id: str, data: bytes, timeout: float, user_id: int = 0) -> Message | None:
        """Send a request and wait up to `timeout` seconds for its reply (a Message, `ok` says how it
        went); None when none came in time. The request may wait on the way no longer than that,
        and a reply that comes later is dropped by the daemon, never returned by a later request."""
        until = time.monotonic() + timeout
        try:
            msg_id = self._send(to_id, data, user_id, timeout, None, ttl=max(timeout, 0.1))
        except NotStored as e:
            if e.code != Code.TIMEOUT:  # the disk is full: say so
                raise
            return None  # the daemon's buffers stayed full all the time
        return self.recv(timeout=max(0.0, until - time.monotonic()), reply_to=msg_id)

    def reply(self, msg: Message, data: bytes, ok: bool = True) -> int | None:
        """Answer the request `msg`: its MSG_ID, or None when its sender has stopped waiting
        (then nothing is sent; a reply would be dropped anyway)."""
        left = None if msg.deadline is None else msg.deadline - time.monotonic()
        if left is not None and left < 0.1:
            return None
        return self._send(msg.from_id, data, msg.msg_id, None, None, ttl=left, reply=True, ok=None if ok else False)

    def status(self) -> dict:
        return self._call(lambda: {"op": "status"})["status"]

    def queue(self, action: str, **keys) -> dict:
        """The operator's request on the lists (`mccs queue`: list, show, hold, release, purge), and
        the daemon's reply; refused ones raise Refused (code bad_id, not_purged, bad_request)."""
        return self._call(lambda: {"op": "queue", "action": action, **keys})

    def line(self, action: str, peer: str) -> dict:
        """The operator's call on a line that is a call (`mccs line`: call, hangup), and the call's
        state after it; refused ones raise Refused (bad_request: no such line, or not a call)."""
        return self._call(lambda: {"op": "line", "action": action, "peer": peer})

    def ping(self, target: str = "", timeout: float = 5.0) -> Pong | None:
        """A round trip to the daemon of host `target` (`BB`, or `BBPROC` to ask whether process
        PROC is attached there; "": this host's daemon, not through the network), through the
        network as a message between the daemons; None if no answer came within `timeout`."""
        host, name = target[:2], target[2:]
        if target and (len(target) < 2 or len(name) > 4):
            raise Refused(f"{target!r} is not HOST or HOST+PROC (e.g. BB, BBLEDG)", Code.BAD_ID)
        request = {"op": "ping", **({"host": host, "name": name, "timeout": timeout} if target else {})}
        t0 = time.monotonic()
        try:
            reply = self._call(lambda: dict(request), time.monotonic() + timeout + self.grace, "patient")
        except _Deadline:
            return None
        if target and not reply.get("answer"):
            return None
        return Pong(reply["host"], time.monotonic() - t0, reply.get("attached"))


_open_clients: weakref.WeakSet[Client] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for client in list(_open_clients):
        client.close()


def connect(path: str | os.PathLike, name: str | None, **kwargs) -> Client:
    """`path` is the daemon's socket, or a host config file whose `socket` is used; `name` is the
    process name (None for administrative requests only, such as status)."""
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
        return attach(config, name)
    return _attached


def SEND(to_id: str, message: bytes, user_id: int = 0) -> tuple[str, int]:
    """CALL SEND(TO_ID, MESSAGE, MSG_ID, USER_ID): a refused TO_ID comes back blank, MSG_ID 0."""
    client = _default()
    try:
        return process_id(to_id), client.send(to_id, message, user_id)
    except Refused as e:
        if e.code in (Code.UNKNOWN_HOST, Code.BAD_ID):
            return BLANK_ID, 0
        raise


def RECV(from_id: str = "", user_id: int = 0, status: int = 0) -> tuple[str, bytes, int, int]:
    """CALL RECV(FROM_ID, MESSAGE, MSG_ID, USER_ID, STATUS): STATUS 0 waits; nothing found is a blank FROM_ID."""
    msg = _default().recv(from_id, user_id, wait=(status == 0))
    if msg is None:
        return BLANK_ID, b"", 0, 0
    return msg.from_id, msg.data, msg.msg_id, msg.user_id
