"""The processes connected to a daemon: one Session per connection, and who may use which name.

A connection holds at most one process name (said in `hello`); the daemon, not the process,
sets FROM_ID from it. Several connections may hold the same name: they are the handlers of a
service, and each message for the name goes to the one that asks first. A connection may also
observe names (`hello` with `observe`, or `observe`): it gets a copy of each message that
arrives for them while it is connected, at most once, never in a handler's way. A name
configured with `[[process]]` and a `uid` or `gid` may be held (or observed) only by a process
of that user or group, checked with the peer credentials of the Unix socket (SO_PEERCRED); with
`strict_names` an unconfigured name is refused too.
"""
from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

from mccs.config import ProcessConfig
from mccs.core.lists import MSGBLOK


@dataclass(frozen=True)
class Creds:
    """Who runs the process at the other end of the socket (SO_PEERCRED), and the groups its
    user is a member of (the shell looks them up: the core reads no user database)."""
    pid: int
    uid: int
    gid: int
    groups: frozenset[int] = frozenset()


@dataclass(eq=False)
class Session:
    conn: int
    creds: Creds | None
    name: str | None = None  # the process id held, once hello was accepted
    handler: bool = False  # takes the messages for its name (not only an observer of it)
    handed: dict[int, MSGBLOK] = field(default_factory=dict)  # RECV_LIST blocks handed out, by seq
    observing: set[str] = field(default_factory=set)  # process ids it gets copies for
    copies: deque[MSGBLOK] = field(default_factory=deque)  # of messages for those, not yet taken

    @property
    def recv_key(self) -> str:
        """Where its RECVs wait on WAIT_LIST: with the other handlers of its name, or on their own."""
        if self.handler:
            assert self.name is not None  # Sessions.attach names a handler
            return self.name
        return f"#{self.conn}"

    def copy(self, from_id: str, user_id: int) -> MSGBLOK | None:
        return next((b for b in self.copies if (not from_id.strip() or b.from_id == from_id)
                     and (not user_id or b.user_id == user_id)), None)


class Sessions:
    def __init__(self, processes: list[ProcessConfig], strict: bool):
        self.by_conn: dict[int, Session] = {}
        self.handlers: dict[str, set[Session]] = defaultdict(set)  # by process id
        self.observers: dict[str, set[Session]] = defaultdict(set)  # by the process id observed
        self._processes = {p.name: p for p in processes}
        self._strict = strict

    def __len__(self) -> int:
        return len(self.by_conn)

    def open(self, conn: int, creds: Creds | None) -> Session:
        session = self.by_conn[conn] = Session(conn, creds)
        return session

    def attach(self, session: Session, pid: str, handler: bool) -> None:
        session.name, session.handler = pid, handler
        if handler:
            self.handlers[pid].add(session)
        else:
            self.observe(session, pid)

    def observe(self, session: Session, pid: str) -> None:
        session.observing.add(pid)
        self.observers[pid].add(session)

    def attached(self, pid: str) -> bool:
        """A handler of `pid` is connected (start on demand, discard, `mccs ping`)."""
        return bool(self.handlers.get(pid))

    def close(self, conn: int) -> Session | None:
        session = self.by_conn.pop(conn, None)
        if session is not None:
            handled = {session.name} if session.handler and session.name is not None else ()  # (attach names it)
            for index, pids in ((self.handlers, handled),
                                (self.observers, session.observing)):
                for pid in pids:
                    index[pid].discard(session)
                    if not index[pid]:
                        del index[pid]
        return session

    def refusal(self, session: Session, name: str) -> str | None:
        """Why `session` may not hold process `name` (4 characters), or None when it may."""
        proc = self._processes.get(name.rstrip())
        if proc is None:
            return f"process name {name.rstrip()!r} is not configured and strict_names is on" if self._strict else None
        if proc.uid is None and proc.gid is None:
            return None
        creds = session.creds
        if creds is None:
            return f"process name {name.rstrip()!r} is reserved and the caller's identity is unknown"
        if proc.uid is not None and creds.uid == proc.uid:
            return None
        if proc.gid is not None and (creds.gid == proc.gid or proc.gid in creds.groups):
            return None
        return f"process name {name.rstrip()!r} is reserved for {proc.owner()}; this process runs as uid {creds.uid}"

