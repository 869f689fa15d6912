"""The checkpoint: one SQLite file per host holding WAIT_LIST's SEND requests, SEND_LIST,
RECV_LIST, the MSG_ID counter and the duplicate window (DESIGN.md section 5).

Every change of a list is made inside `transaction()`; the daemon wraps one loop pass in one
transaction (group commit) and lets nothing that depends on the pass leave before it commits.
sqlite-utils builds the schema; the hot paths use the connection directly (FACTS.md: ~2.5 µs a
statement against ~70 µs through sqlite-utils).
"""
from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import sqlite_utils

SCHEMA_VERSION = 1
DUP_WINDOW = 8192  # MSG_IDs per origin, by distance in the origin's id space (not by count received here)
ID_SPACE = 65535  # MSG_IDs are 1..65535
SEND_DONE_KEEP = 65536  # finished SEND request ids remembered for retries


class CheckpointError(RuntimeError):
    """The checkpoint cannot be used; the message says why and what to do. The file is left as it is."""


@dataclass
class Row:
    """A MSGBLOK as stored: `seq` orders the lists and survives restarts."""
    seq: int
    to_id: str
    from_id: str
    msg_id: int
    user_id: int
    data: bytes
    ts: float


@dataclass
class PendingSend:
    """A SEND PRQBLOK still on WAIT_LIST (its list was full), kept so a retry finds it."""
    req: str
    from_id: str
    to_id: str
    user_id: int
    data: bytes


@dataclass
class Restored:
    send_list: list[Row]
    recv_list: list[Row]
    wait_list: list[PendingSend]
    next_msg_id: int
    dup_keys: list[tuple[str, int]]  # oldest first


class Checkpoint:
    def __init__(self, path: str | os.PathLike, host_id: str, synchronous: str = "full"):
        self.path = Path(path)
        self.host_id = host_id
        self._lock_fd = self._lock()
        try:
            self.conn = self._open(synchronous)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._dups: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        self._dup_set: set[tuple[str, int]] = set()
        self.commits = 0
        self._sends = 0

    # -- opening -------------------------------------------------------------------------
    def _lock(self) -> int:
        """One daemon per checkpoint: an flock on a side file, released by the kernel if we die."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CheckpointError(f"checkpoint {self.path} is in use by another daemon (lock {self.path}.lock)") from None
        return fd

    def _open(self, synchronous: str) -> sqlite3.Connection:
        new = not self.path.exists() or self.path.stat().st_size == 0
        old_umask = os.umask(0o077)  # the checkpoint and its WAL are owner-only
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            if not new:
                self._check_integrity(conn)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            if new:
                self._create(conn)
            self._check_identity(conn)
        except sqlite3.DatabaseError as e:
            raise CheckpointError(f"checkpoint {self.path} is not a usable SQLite database ({e}); "
                                  "it was left untouched: move it aside to start empty, or restore a backup") from None
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        return conn

    def _check_integrity(self, conn: sqlite3.Connection) -> None:
        result = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
        if result != ["ok"]:
            raise CheckpointError(f"checkpoint {self.path} failed SQLite's integrity check: {'; '.join(result[:3])}. "
                                  "It was left untouched: move it aside to start empty, or restore a backup")

    def _create(self, conn: sqlite3.Connection) -> None:
        db = sqlite_utils.Database(conn)
        msgblok = {"seq": int, "to_id": str, "from_id": str, "msg_id": int, "user_id": int, "data": bytes, "ts": float}
        with conn:
            conn.execute("BEGIN")
            db["meta"].create({"key": str, "value": str}, pk="key")
            db["send_list"].create(msgblok, pk="seq")
            db["recv_list"].create(msgblok, pk="seq")
            db["wait_list"].create({"req": str, "seq": int, "from_id": str, "to_id": str, "user_id": int,
                                    "data": bytes}, pk="req")
            db["send_done"].create({"req": str, "seq": int, "msg_id": int, "to_id": str}, pk="req")
            db["send_done"].create_index(["seq"])
            db["dup_window"].create({"origin": str, "msg_id": int, "seq": int}, pk=("origin", "msg_id"))
            db["meta"].insert_all([{"key": "schema_version", "value": str(SCHEMA_VERSION)},
                                   {"key": "host_id", "value": self.host_id},
                                   {"key": "next_msg_id", "value": "1"},
                                   {"key": "next_seq", "value": "1"}])

    def _check_identity(self, conn: sqlite3.Connection) -> None:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("schema_version") != str(SCHEMA_VERSION):
            raise CheckpointError(f"checkpoint {self.path} has schema version {meta.get('schema_version')!r}, "
                                  f"this MCCS reads version {SCHEMA_VERSION}")
        if meta.get("host_id") != self.host_id:
            raise CheckpointError(f"checkpoint {self.path} belongs to host {meta.get('host_id')!r}, "
                                  f"not {self.host_id!r}: refusing to open it")

    # -- Initialization -------------------------------------------------------------------
    def restore(self) -> Restored:
        """Read back everything the lists held at the last commit."""
        q = self.conn.execute

        def rows(table):
            return [Row(*r) for r in q(f"SELECT seq, to_id, from_id, msg_id, user_id, data, ts FROM {table} ORDER BY seq")]
        waiting = [PendingSend(*r) for r in q("SELECT req, from_id, to_id, user_id, data FROM wait_list ORDER BY seq")]
        dups = [(o, m) for o, m in q("SELECT origin, msg_id FROM dup_window ORDER BY seq")]
        for key in dups:
            self._remember_dup(key)
        self._next_seq = int(self._meta("next_seq"))
        return Restored(rows("send_list"), rows("recv_list"), waiting, int(self._meta("next_msg_id")), dups)

    def _meta(self, key: str) -> str:
        return self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0]

    # -- group commit ---------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self):
        """One loop pass: everything inside commits together or not at all."""
        self.conn.execute("BEGIN")
        self._dirty = False
        try:
            yield self
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        if self._dirty:
            self.conn.execute("UPDATE meta SET value = ? WHERE key = 'next_seq'", (str(self._next_seq),))
        self.conn.execute("COMMIT")
        self.commits += self._dirty

    def next_seq(self) -> int:
        seq, self._next_seq = self._next_seq, self._next_seq + 1
        return seq

    def add(self, table: str, row: Row) -> None:
        self._dirty = True
        self.conn.execute(f"INSERT INTO {table} (seq, to_id, from_id, msg_id, user_id, data, ts) VALUES (?,?,?,?,?,?,?)",
                          (row.seq, row.to_id, row.from_id, row.msg_id, row.user_id, row.data, row.ts))

    def delete(self, table: str, seq: int) -> None:
        self._dirty = True
        self.conn.execute(f"DELETE FROM {table} WHERE seq = ?", (seq,))

    def set_next_msg_id(self, value: int) -> None:
        self._dirty = True
        self.conn.execute("UPDATE meta SET value = ? WHERE key = 'next_msg_id'", (str(value),))

    # -- SEND requests --------------------------------------------------------------------
    def add_waiting(self, p: PendingSend) -> None:
        self._dirty = True
        self.conn.execute("INSERT OR REPLACE INTO wait_list (req, seq, from_id, to_id, user_id, data) VALUES (?,?,?,?,?,?)",
                          (p.req, self.next_seq(), p.from_id, p.to_id, p.user_id, p.data))

    def delete_waiting(self, req: str) -> None:
        self._dirty = True
        self.conn.execute("DELETE FROM wait_list WHERE req = ?", (req,))

    def send_done(self, req: str, msg_id: int, to_id: str) -> None:
        """Remember a finished SEND, so the same request retried after a restart is not stored twice."""
        self._dirty = True
        seq = self.next_seq()
        self.conn.execute("INSERT OR REPLACE INTO send_done (req, seq, msg_id, to_id) VALUES (?,?,?,?)",
                          (req, seq, msg_id, to_id))
        self._sends += 1
        if self._sends % 4096 == 0:
            self.conn.execute("DELETE FROM send_done WHERE seq < (SELECT seq FROM send_done ORDER BY seq DESC "
                              "LIMIT 1 OFFSET ?)", (SEND_DONE_KEEP,))

    def find_send_done(self, req: str) -> tuple[int, str] | None:
        row = self.conn.execute("SELECT msg_id, to_id FROM send_done WHERE req = ?", (req,)).fetchone()
        return tuple(row) if row else None

    # -- duplicate window -----------------------------------------------------------------
    def is_duplicate(self, origin: str, msg_id: int) -> bool:
        return (origin, msg_id) in self._dup_set

    def add_dup_key(self, origin: str, msg_id: int) -> None:
        self._dirty = True
        self.conn.execute("INSERT OR REPLACE INTO dup_window (origin, msg_id, seq) VALUES (?,?,?)",
                          (origin, msg_id, self.next_seq()))
        for old in self._remember_dup((origin, msg_id)):
            self.conn.execute("DELETE FROM dup_window WHERE origin = ? AND msg_id = ?", old)

    def _remember_dup(self, key: tuple[str, int]) -> list[tuple[str, int]]:
        """Keep the keys within DUP_WINDOW ids behind the newest one from this origin. This host
        may see only a few of the origin's ids (it sends to others, or to its own processes), so
        a window by count would keep ids the origin has long since reused."""
        window = self._dups[key[0]]
        window.append(key[1])
        self._dup_set.add(key)
        old = []
        while window and ((key[1] - window[0]) % ID_SPACE >= DUP_WINDOW or len(window) > DUP_WINDOW):
            k = (key[0], window.popleft())
            self._dup_set.discard(k)
            old.append(k)
        return old

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


def read_only_summary(path: str | os.PathLike) -> dict:
    """List lengths straight from the file, for `mccs status` while the daemon is down."""
    uri = f"file:{Path(path).resolve()}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            count = lambda t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: E731
            return {"send": count("send_list"), "recv": count("recv_list"), "wait": count("wait_list")}
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e}") from None

