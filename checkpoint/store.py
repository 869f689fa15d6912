"""The checkpoint: one SQLite file per host holding WAIT_LIST's SEND requests, SEND_LIST,
RECV_LIST, the MSG_ID counter, the duplicate window and the sent window (docs/DESIGN.md section 5).

The daemon's core hands over a pass's changes as data (`checkpoint.changes`); `apply()` runs
them in one transaction and commits (group commit) before anything that depends on them leaves
the daemon. A checkpoint is created only on a first start (no file and no trace of an earlier
one) or when the operator asks for a new one: an empty or missing file that a daemon used
before is refused, never silently replaced by an empty host.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import itertools
import logging
import os
import secrets
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NotRequired, TypedDict

from .changes import (CUSTODY, DOUBT, LOOSE, MSGBLOK_COLUMNS, WAITING_COLUMNS, BlobWrite, Change, Kept, PendingSend,
                      Restored, Row, Stored, Table)

if TYPE_CHECKING:
    import sqlite_utils

MSGBLOK_SCHEMA = {"seq": int, "to_id": str, "from_id": str, "msg_id": int, "user_id": int, "data": bytes,
                  "ts": float, "hops": int, "pseq": int, "epoch": str, "expires": float, "flags": int, "crc": int,
                  "priority": int, "text": int, "seal": bytes}
PARTIALS_SCHEMA = {"id": int, "origin": str, "msg_id": int, "to_id": str, "total": int, "crc": int, "got": int,
                   "run": int, "ts": float, "peer": str}
FORGETS_SCHEMA = {"peer": str, "from_id": str, "msg_id": int, "to_id": str, "total": int, "crc": int}
SEG_DONE_SCHEMA = {"origin": str, "msg_id": int, "to_id": str, "total": int, "crc": int, "seq": int}
WAITING_SCHEMA = {"req": str, "seq": int, "from_id": str, "to_id": str, "user_id": int, "data": bytes, "ttl": float,
                  "flags": int, "priority": int}
PAIR_OUT_SCHEMA = {"dest": str, "priority": int, "next": int}
PAIR_IN_SCHEMA = {"origin": str, "priority": int, "epoch": str, "expect": int}
CUSTODY_OUT_SCHEMA = {"dest": str, "priority": int, "first": int, "epoch": str, "mine": str, "syncing": int}
CUSTODY_IN_SCHEMA = {"origin": str, "priority": int, "epoch": str, "syncing": int}
RETIRED_SCHEMA = {"origin": str, "priority": int, "epoch": str}
GAPS_SCHEMA = {"origin": str, "priority": int, "epoch": str, "pseq": int, "until": float}

log = logging.getLogger("checkpoint.store")

SCHEMA_VERSION = 13
#: Bytes of a text a version-8 partial held, copied into one row of PIECES each (_migrate_from_8).
PIECE_COPY = 1 << 16
RESTORED = "restored_from_backup"  # meta key of a backup's copy: the time it was taken (until it is opened)
SIDE_FILES = ("-wal", "-shm")


class CheckpointError(RuntimeError):
    """The checkpoint cannot be used; the message says why and what to do. The file is left as it is."""


class CheckpointFull(CheckpointError):
    """The disk (or the file system holding the checkpoint) is full: the pass was rolled back."""


class Checkpoint:
    def __init__(self, path: str | os.PathLike, host_id: str, synchronous: str = "full", *, new: bool = False,
                 random_bytes: Callable[[int], bytes] = secrets.token_bytes):
        """`random_bytes(n)`: where a new epoch comes from (a simulator's seeded source: a run is
        the same each time)."""
        self.path = Path(path)
        self.host_id = host_id
        self.random_bytes = random_bytes
        self._lock_fd, first_start = self._lock()
        try:
            self.conn = self._open(synchronous, new, first_start)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self.commits = 0

    @classmethod
    def in_memory(cls, host_id: str, random_bytes: Callable[[int], bytes] = secrets.token_bytes) -> "Checkpoint":
        """A checkpoint with no file, for the simulator's hosts (mccs/testbed/hostsim.py): the same schema,
        statements and reads, no lock and no disk; what it holds lives as long as the object (a
        simulated crash keeps it, as the disk would)."""
        cp = cls.__new__(cls)
        cp.path, cp.host_id, cp._lock_fd, cp.commits, cp.random_bytes = Path(":memory:"), host_id, -1, 0, random_bytes
        cp.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        cp._create(cp.conn)
        cp._check_identity(cp.conn)
        return cp

    # -- opening -------------------------------------------------------------------------
    def _lock(self) -> tuple[int, bool]:
        """One daemon per checkpoint: an flock on a side file, released by the kernel if we die.
        The lock file outlives the daemon, so it also tells that this checkpoint was used before."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = Path(f"{self.path}.lock")
        first_start = not lock.exists()
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CheckpointError(f"checkpoint {self.path} is in use by another daemon (lock {lock})") from None
        return fd, first_start

    def _open(self, synchronous: str, new: bool, first_start: bool) -> sqlite3.Connection:
        exists = self.path.exists()
        empty = not exists or self.path.stat().st_size == 0
        if new:
            if not empty:
                raise CheckpointError(f"--new-checkpoint: {self.path} already holds a checkpoint; it is not "
                                      "replaced. Move it aside first if you really mean to start this host empty")
            self._move_aside(exists)
        elif empty and (not first_start or self._side_files()):  # (an empty file no daemon used: made here)
            what = "is empty" if exists else "is missing"
            raise CheckpointError(
                f"checkpoint {self.path} {what}, but a daemon used it before ({self.path}.lock"
                f"{' and a WAL' if self._side_files() else ''} beside it): its queued messages and MSG_IDs would be "
                "lost. Restore it from a backup, or start this host empty on purpose with "
                "'mccs daemon --new-checkpoint'")
        old_umask = os.umask(0o077)  # the checkpoint and its WAL are owner-only
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            if not empty:
                self._check_integrity(conn)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            if empty:
                self._create(conn)
            self._check_identity(conn)
            self._renew_if_restored(conn)
        except sqlite3.DatabaseError as e:
            raise CheckpointError(f"checkpoint {self.path} is not a usable SQLite database ({e}); "
                                  "it was left untouched: restore a backup, or move it aside and start "
                                  "empty with 'mccs daemon --new-checkpoint'") from None
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        return conn

    def _side_files(self) -> list[Path]:
        return [p for p in (Path(f"{self.path}{s}") for s in SIDE_FILES) if p.exists()]

    def _move_aside(self, exists: bool) -> None:
        """A new checkpoint never reads an old WAL: leftovers are renamed, not deleted."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for p in self._side_files() + ([self.path] if exists else []):
            p.rename(f"{p}.{stamp}.old")

    def _check_integrity(self, conn: sqlite3.Connection) -> None:
        result = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
        if result != ["ok"]:
            raise CheckpointError(f"checkpoint {self.path} failed SQLite's integrity check: {'; '.join(result[:3])}. "
                                  "It was left untouched: restore a backup, or move it aside and start empty "
                                  "with 'mccs daemon --new-checkpoint'")

    def _create(self, conn: sqlite3.Connection) -> None:
        db = _database(conn)
        with conn:
            conn.execute("BEGIN")
            db.table(Table.META).create({"key": str, "value": str}, pk="key")
            db.table(Table.SEND_LIST).create(MSGBLOK_SCHEMA, pk="seq")
            db.table(Table.RECV_LIST).create(MSGBLOK_SCHEMA, pk="seq")
            db.table(Table.WAIT_LIST).create(WAITING_SCHEMA, pk="req")
            db.table(Table.SEND_DONE).create({"req": str, "seq": int, "msg_id": int, "to_id": str}, pk="req")
            db.table(Table.SEND_DONE).create_index(["seq"])
            db.table(Table.DUP_WINDOW).create({"host": str, "msg_id": int, "seq": int}, pk=("host", "msg_id"))
            db.table(Table.SENT_WINDOW).create({"host": str, "msg_id": int, "seq": int}, pk=("host", "msg_id"))
            self._create_routing_tables(db)
            self._create_segment_tables(db)
            db.table(Table.PEER_EPOCH).create({"host": str, "epoch": str}, pk="host")
            self._create_custody_tables(db)
            self._create_gaps(db)
            self._create_seen(db)
            db.table(Table.META).insert_all([{"key": "schema_version", "value": str(SCHEMA_VERSION)},
                                             {"key": "host_id", "value": self.host_id},
                                             {"key": "next_msg_id", "value": "1"},
                                             {"key": "next_seq", "value": "1"},
                                             {"key": "epoch", "value": self._new_epoch()}])

    def _new_epoch(self) -> str:
        return self.random_bytes(4).hex()

    @staticmethod
    def _create_routing_tables(db: sqlite_utils.Database) -> None:
        db.table(Table.KNOWN_HOSTS).create({"host": str}, pk="host")
        Checkpoint._create_routing_pairs(db)

    @staticmethod
    def _create_routing_pairs(db: sqlite_utils.Database) -> None:
        db.table(Table.PAIR_OUT).create(PAIR_OUT_SCHEMA, pk=("dest", "priority"))
        db.table(Table.PAIR_IN).create(PAIR_IN_SCHEMA, pk=("origin", "priority"))

    @staticmethod
    def _create_segment_tables(db: sqlite_utils.Database) -> None:
        db.table(Table.PARTIALS).create(PARTIALS_SCHEMA, pk="id", not_null={"peer"}, defaults={"peer": ""})
        db.table(Table.TEXTS).create({"id": int, "data": bytes}, pk="id")
        db.table(Table.SEND_ACKED).create({"seq": int, "acked": int, "peer": str}, pk="seq", not_null={"peer"},
                                          defaults={"peer": ""})
        db.table(Table.SEG_DONE).create(SEG_DONE_SCHEMA, pk=("origin", "msg_id"))
        Checkpoint._create_piece_tables(db)

    @staticmethod
    def _create_piece_tables(db: sqlite_utils.Database) -> None:
        """Texts received in segments, in their pieces (schema 9), and the next hosts still to tell
        that a transfer they hold the start of will not go on there."""
        if Table.PIECES not in db.table_names():
            db.execute(f"CREATE TABLE {Table.PIECES} (id INTEGER PRIMARY KEY, text INTEGER NOT NULL, "
                       "off INTEGER NOT NULL, data BLOB NOT NULL)")
            db.execute(f"CREATE UNIQUE INDEX {Table.PIECES}_text_off ON {Table.PIECES} (text, off)")
        if Table.FORGETS not in db.table_names():
            db.table(Table.FORGETS).create(FORGETS_SCHEMA, pk=("peer", "from_id", "msg_id"))
        for table in (Table.SEND_LIST, Table.RECV_LIST):  # a row's long text goes with it
            drop = f"DELETE FROM {Table.TEXTS} WHERE id = old.text; DELETE FROM {Table.PIECES} WHERE text = old.text;"
            for trigger, when in (("deleted", f"AFTER DELETE ON {table} WHEN old.text != 0"),
                                  ("dropped", f"AFTER UPDATE OF text ON {table} WHEN old.text != 0 "
                                              "AND new.text != old.text")):
                db.execute(f"DROP TRIGGER IF EXISTS {table}_text_{trigger}")
                db.execute(f"CREATE TRIGGER {table}_text_{trigger} {when} BEGIN {drop} END")

    @staticmethod
    def _create_custody_tables(db: sqlite_utils.Database) -> None:
        """End-to-end custody (schema 10, mccs.core.custody): the streams this origin keeps copies
        of, and the streams whose origin keeps copies of what it sends here. Schema 11 adds to the
        first the epoch a stream is numbered under (`mine`, "" for the host's own) and whether the
        origin, restored from a backup, waits for the destination's answer (`syncing`)."""
        for table, schema, key in ((Table.CUSTODY_OUT, CUSTODY_OUT_SCHEMA, "dest"),
                                   (Table.CUSTODY_IN, CUSTODY_IN_SCHEMA, "origin")):
            if table not in db.table_names():
                db.table(table).create(schema, pk=(key, "priority"))

    @staticmethod
    def _create_gaps(db: sqlite_utils.Database) -> None:
        """Schema 12, end-to-end protection (mccs.core.e2e): numbered messages that came refused (how
        long their stream waits), and the epochs each stream left (a protected message of one is a replay)."""
        if Table.GAPS not in db.table_names():
            db.table(Table.GAPS).create(GAPS_SCHEMA, pk=("origin", "priority", "epoch", "pseq"))
        if Table.RETIRED not in db.table_names():
            db.table(Table.RETIRED).create(RETIRED_SCHEMA, pk=("origin", "priority", "epoch"))

    @staticmethod
    def _create_seen(db: sqlite_utils.Database) -> None:
        """Schema 13: the MSG_IDs that came in custody streams, which an origin restored from a backup
        asks about (mccs.core.custody, "doubts")."""
        if Table.SEEN not in db.table_names():
            db.table(Table.SEEN).create({"host": str, "msg_id": int, "seq": int}, pk=("host", "msg_id"))

    def _check_identity(self, conn: sqlite3.Connection) -> None:
        meta = dict(conn.execute(f"SELECT key, value FROM {Table.META}").fetchall())
        if meta.get("host_id") != self.host_id:
            raise CheckpointError(f"checkpoint {self.path} belongs to host {meta.get('host_id')!r}, "
                                  f"not {self.host_id!r}: refusing to open it")
        version = meta.get("schema_version")
        if version not in [str(v) for v in range(1, SCHEMA_VERSION + 1)]:
            raise CheckpointError(f"checkpoint {self.path} has schema version {version!r}, "
                                  f"this MCCS reads versions 1 to {SCHEMA_VERSION}")
        for since, migrate in ((1, self._migrate_from_1), (2, self._migrate_from_2), (3, self._migrate_from_3),
                               (4, self._migrate_from_4), (5, self._migrate_from_5),
                               (6, self._migrate_from_6), (7, self._migrate_from_7), (8, self._migrate_from_8),
                               (9, self._migrate_from_9), (10, self._migrate_from_10),
                               (11, self._migrate_from_11), (12, self._migrate_from_12)):
            if int(version) <= since:
                migrate(conn)

    def _migrate_from_1(self, conn: sqlite3.Connection) -> None:
        """Version 2 adds the sent window (seeded from the SENDs remembered for retries, the only
        record of which ids went where) and an epoch."""
        db = _database(conn)
        with conn:
            conn.execute("BEGIN")
            conn.execute(f"ALTER TABLE {Table.DUP_WINDOW} RENAME COLUMN origin TO host")
            db.table(Table.SENT_WINDOW).create({"host": str, "msg_id": int, "seq": int}, pk=("host", "msg_id"))
            conn.execute(f"INSERT OR REPLACE INTO {Table.SENT_WINDOW} (host, msg_id, seq) SELECT substr(to_id, 1, 2), "
                         f"msg_id, seq FROM {Table.SEND_DONE} WHERE substr(to_id, 1, 2) != ? ORDER BY seq",
                         (self.host_id,))
            conn.execute(f"INSERT OR REPLACE INTO {Table.META} VALUES ('epoch', ?)", (self._new_epoch(),))
            conn.execute(f"UPDATE {Table.META} SET value = '2' WHERE key = 'schema_version'")

    def _migrate_from_2(self, conn: sqlite3.Connection) -> None:
        """Version 3 adds routing: hop counts and end-to-end numbers on the lists, the hosts
        learned, and the end-to-end counters per destination and per origin."""
        db = _database(conn)
        with conn:
            conn.execute("BEGIN")
            for table in (Table.SEND_LIST, Table.RECV_LIST):
                for column, default in (("hops", "0"), ("pseq", "0"), ("epoch", "''")):
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} "
                                 f"{'TEXT' if column == 'epoch' else 'INTEGER'} NOT NULL DEFAULT {default}")
            self._create_routing_tables(db)
            conn.execute(f"UPDATE {Table.META} SET value = '3' WHERE key = 'schema_version'")

    def _migrate_from_3(self, conn: sqlite3.Connection) -> None:
        """Version 4 adds expiry and notices: when each stored message stops waiting, and its flags
        (receipt asked, a notice, void); a waiting SEND's ttl and flags."""
        with conn:
            conn.execute("BEGIN")
            for table, columns in ((Table.SEND_LIST, ("expires", "flags")), (Table.RECV_LIST, ("expires", "flags")),
                                   (Table.WAIT_LIST, ("ttl", "flags"))):
                for column in columns:
                    kind = "INTEGER" if column == "flags" else "REAL"
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind} NOT NULL DEFAULT 0")
            conn.execute(f"UPDATE {Table.META} SET value = '4' WHERE key = 'schema_version'")

    def _migrate_from_4(self, conn: sqlite3.Connection) -> None:
        """Version 5 adds large messages: a text's CRC-32 and how much of it the next host holds,
        the partials being received and the transfers completed lately."""
        with conn:
            conn.execute("BEGIN")
            for table in (Table.SEND_LIST, Table.RECV_LIST):
                for column in ("crc", "text"):
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
            self._create_segment_tables(_database(conn))
            conn.execute(f"UPDATE {Table.META} SET value = '5' WHERE key = 'schema_version'")

    def _migrate_from_5(self, conn: sqlite3.Connection) -> None:
        """Version 6 keeps the epoch each neighbour last signed on with: a new one means its
        checkpoint was started afresh, and what this host remembers of it is forgotten."""
        with conn:
            conn.execute("BEGIN")
            _database(conn).table(Table.PEER_EPOCH).create({"host": str, "epoch": str}, pk="host")
            conn.execute(f"UPDATE {Table.META} SET value = '6' WHERE key = 'schema_version'")

    def _migrate_from_6(self, conn: sqlite3.Connection) -> None:
        """Version 7 adds priorities: each stored or waiting message's, and the end-to-end numbers
        per (host pair, priority); the numbers so far are those of priority 0."""
        with conn:
            conn.execute("BEGIN")
            for table in (Table.SEND_LIST, Table.RECV_LIST, Table.WAIT_LIST):
                conn.execute(f"ALTER TABLE {table} ADD COLUMN priority INTEGER NOT NULL DEFAULT 0")
            for table in (Table.PAIR_OUT, Table.PAIR_IN):
                conn.execute(f"ALTER TABLE {table} RENAME TO {table}_6")
            self._create_routing_pairs(_database(conn))
            conn.execute(f"INSERT INTO {Table.PAIR_OUT} (dest, priority, next) "
                         f"SELECT dest, 0, next FROM {Table.PAIR_OUT}_6")
            conn.execute(f"INSERT INTO {Table.PAIR_IN} (origin, priority, epoch, expect) "
                         f"SELECT origin, 0, epoch, expect FROM {Table.PAIR_IN}_6")
            for table in (Table.PAIR_OUT, Table.PAIR_IN):
                conn.execute(f"DROP TABLE {table}_6")
            conn.execute(f"UPDATE {Table.META} SET value = '7' WHERE key = 'schema_version'")

    def _migrate_from_7(self, conn: sqlite3.Connection) -> None:
        """Version 8 keeps which next host holds the start of a message in segments: one that goes
        on by another host starts again from its first byte there ("": not known, resumed as before)."""
        with conn:
            conn.execute("BEGIN")
            if "peer" not in {r[1] for r in conn.execute(f"PRAGMA table_info({Table.SEND_ACKED})")}:
                conn.execute(f"ALTER TABLE {Table.SEND_ACKED} ADD COLUMN peer TEXT NOT NULL DEFAULT ''")
            conn.execute(f"UPDATE {Table.META} SET value = '8' WHERE key = 'schema_version'")

    def _migrate_from_8(self, conn: sqlite3.Connection) -> None:
        """Version 9 keeps a text received in segments in the pieces it came in (PIECES), not in room
        made for all of it with its first piece; a partial names the next host that sends it (the
        one that counts on it), and the next hosts still to tell that a transfer will not go on
        there are kept (FORGETS). What a partial held is copied into pieces."""
        with conn:
            conn.execute("BEGIN")
            if "peer" not in {r[1] for r in conn.execute(f"PRAGMA table_info({Table.PARTIALS})")}:
                conn.execute(f"ALTER TABLE {Table.PARTIALS} ADD COLUMN peer TEXT NOT NULL DEFAULT ''")
            self._create_piece_tables(_database(conn))
            partials = conn.execute(f"SELECT p.id, p.got FROM {Table.PARTIALS} p "
                                    f"JOIN {Table.TEXTS} t ON t.id = p.id").fetchall()
            for pid, got in partials:
                with conn.blobopen(Table.TEXTS, "data", pid, readonly=True) as blob:
                    for off in range(0, got, PIECE_COPY):
                        conn.execute(f"INSERT INTO {Table.PIECES} (text, off, data) VALUES (?, ?, ?)",
                                     (pid, off, blob.read(min(PIECE_COPY, got - off))))
                conn.execute(f"DELETE FROM {Table.TEXTS} WHERE id = ?", (pid,))
            conn.execute(f"UPDATE {Table.META} SET value = '9' WHERE key = 'schema_version'")

    def _migrate_from_9(self, conn: sqlite3.Connection) -> None:
        """Version 10 keeps end-to-end custody: no stream has it yet, so nothing else changes."""
        with conn:
            conn.execute("BEGIN")
            self._create_custody_tables(_database(conn))
            conn.execute(f"UPDATE {Table.META} SET value = '10' WHERE key = 'schema_version'")

    def _migrate_from_10(self, conn: sqlite3.Connection) -> None:
        """Version 11 lets an origin restored from a backup keep its custody streams: each stream's
        own epoch, and whether it waits for the destination's answer (none does yet)."""
        with conn:
            conn.execute("BEGIN")
            have = _database(conn).table(Table.CUSTODY_OUT).columns_dict  # (made by _migrate_from_9 already)
            for column, kind in (("mine", "TEXT NOT NULL DEFAULT ''"), ("syncing", "INTEGER NOT NULL DEFAULT 0")):
                if column not in have:
                    conn.execute(f"ALTER TABLE {Table.CUSTODY_OUT} ADD COLUMN {column} {kind}")
            conn.execute(f"UPDATE {Table.META} SET value = '11' WHERE key = 'schema_version'")

    def _migrate_from_11(self, conn: sqlite3.Connection) -> None:
        """Version 12 keeps the end-to-end trailer of a protected message a transit host carries."""
        with conn:
            conn.execute("BEGIN")
            for table in (Table.SEND_LIST, Table.RECV_LIST):
                if "seal" not in _database(conn).table(table).columns_dict:  # (a test's file may have it)
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN seal BLOB NOT NULL DEFAULT x''")
            self._create_gaps(_database(conn))
            conn.execute(f"UPDATE {Table.META} SET value = '12' WHERE key = 'schema_version'")

    def _migrate_from_12(self, conn: sqlite3.Connection) -> None:
        """Version 13 keeps the MSG_IDs that came in custody streams (`_create_seen`)."""
        with conn:
            conn.execute("BEGIN")
            self._create_seen(_database(conn))
            conn.execute(f"UPDATE {Table.META} SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    def _renew_if_restored(self, conn: sqlite3.Connection) -> None:
        """A backup put back in place (`backup()` marks its copies): the host gave MSG_IDs and
        end-to-end numbers after the backup that its peers still remember, and holds messages the
        peers have had since. It keeps its lists but starts a new incarnation: a new epoch (the
        peers forget what they kept of the old one, mccs.core.epochs), its own messages numbered again
        from 1, and nothing remembered of the peers' ids and numbers, which they restart too.
        Except the streams kept in custody (mccs.core.custody), which keep their order and numbers:
        as an origin, this host keeps its copies and numbers the stream under its old epoch (`mine`),
        syncing until the destination says how far it got; as a destination, its streams are syncing
        until the origin's probe tells which restored messages were taken since the backup and
        which it must send again."""
        meta = dict(conn.execute(f"SELECT key, value FROM {Table.META}").fetchall())
        if RESTORED not in meta:
            return
        kept = (f"EXISTS (SELECT 1 FROM {Table.CUSTODY_OUT} c WHERE c.dest = substr({Table.SEND_LIST}.to_id, 1, 2) "
                f"AND c.priority = {Table.SEND_LIST}.priority AND c.mine = {Table.SEND_LIST}.epoch)")
        with conn:
            conn.execute("BEGIN")
            for table in (Table.DUP_WINDOW, Table.SENT_WINDOW, Table.SEND_ACKED, Table.SEG_DONE,
                          Table.FORGETS):  # (the peers drop what this host fed them)
                conn.execute(f"DELETE FROM {table}")
            conn.execute(f"UPDATE {Table.CUSTODY_OUT} SET mine = ? WHERE mine = ''", (meta["epoch"],))
            conn.execute(f"UPDATE {Table.CUSTODY_OUT} SET syncing = 1")
            conn.execute(f"DELETE FROM {Table.PAIR_OUT} WHERE NOT EXISTS (SELECT 1 FROM {Table.CUSTODY_OUT} c WHERE "
                         f"c.dest = {Table.PAIR_OUT}.dest AND c.priority = {Table.PAIR_OUT}.priority)")
            conn.execute(f"DELETE FROM {Table.PAIR_IN} WHERE NOT EXISTS (SELECT 1 FROM {Table.CUSTODY_IN} c WHERE "
                         f"c.origin = {Table.PAIR_IN}.origin AND c.priority = {Table.PAIR_IN}.priority AND "
                         f"c.epoch = {Table.PAIR_IN}.epoch)")
            conn.execute(f"DELETE FROM {Table.CUSTODY_IN} WHERE NOT EXISTS (SELECT 1 FROM {Table.PAIR_IN} p WHERE "
                         f"p.origin = {Table.CUSTODY_IN}.origin AND p.priority = {Table.CUSTODY_IN}.priority)")
            conn.execute(f"UPDATE {Table.CUSTODY_IN} SET syncing = 1")
            conn.execute(f"DELETE FROM {Table.PIECES} WHERE text IN (SELECT id FROM {Table.PARTIALS})")
            conn.execute(f"DELETE FROM {Table.PARTIALS}")
            conn.execute(f"DELETE FROM {Table.SEND_LIST} WHERE flags & ? AND NOT {kept}", (CUSTODY,))
            doubtful = conn.execute(f"UPDATE {Table.SEND_LIST} SET flags = flags | ? WHERE substr(from_id, 1, 2) = ? "
                                    f"AND pseq = 0 AND NOT flags & ? AND EXISTS (SELECT 1 FROM {Table.CUSTODY_OUT} c "
                                    f"WHERE c.dest = substr(to_id, 1, 2) AND c.priority = {Table.SEND_LIST}.priority)",
                                    (DOUBT, self.host_id, LOOSE)).rowcount
            conn.execute(f"UPDATE {Table.SEND_LIST} SET pseq = 0, epoch = '' WHERE substr(from_id, 1, 2) = ? "
                         f"AND NOT {kept}", (self.host_id,))
            conn.execute(f"UPDATE {Table.META} SET value = ? WHERE key = 'epoch'", (self._new_epoch(),))
            conn.execute(f"DELETE FROM {Table.META} WHERE key = ?", (RESTORED,))
        log.warning("checkpoint %s was restored from a backup taken at %s: this host starts a new epoch with its "
                    "lists as they were then", self.path, meta[RESTORED])
        if doubtful:
            log.warning("%d of this host's messages had not left it when the backup was taken: each waits until its "
                        "destination says whether it had it since (mccs.core.custody)", doubtful)

    def renew_if_restored(self) -> None:
        """The same on an open checkpoint (the simulator's, restored in memory)."""
        self._renew_if_restored(self.conn)

    # -- Initialization -------------------------------------------------------------------
    def restore(self) -> Restored:
        """Read back everything the lists held at the last commit."""
        q = self.conn.execute
        with self.conn:  # progress of blocks that left SEND_LIST another way (expired) is forgotten
            q(f"DELETE FROM {Table.SEND_ACKED} WHERE seq NOT IN (SELECT seq FROM {Table.SEND_LIST})")

        def keys(table: Table) -> list[tuple[str, int]]:
            return [(h, m) for h, m in q(f"SELECT host, msg_id FROM {table} ORDER BY seq")]
        meta = dict(q(f"SELECT key, value FROM {Table.META}").fetchall())
        return Restored(_rows(self.conn, Table.SEND_LIST), _rows(self.conn, Table.RECV_LIST), _waiting(self.conn),
                        int(meta["next_msg_id"]), int(meta["next_seq"]), keys(Table.DUP_WINDOW),
                        keys(Table.SENT_WINDOW), meta["epoch"],
                        [h for (h,) in q(f"SELECT host FROM {Table.KNOWN_HOSTS} ORDER BY host")],
                        {(d, p): n for d, p, n in q(f"SELECT dest, priority, next FROM {Table.PAIR_OUT}")},
                        _pairs_in(self.conn),
                        q(f"SELECT id, origin, msg_id, to_id, total, crc, got, run, ts, peer "
                          f"FROM {Table.PARTIALS}").fetchall(),
                        q(f"SELECT origin, msg_id, to_id, total, crc FROM {Table.SEG_DONE} ORDER BY seq").fetchall(),
                        dict(q(f"SELECT host, epoch FROM {Table.PEER_EPOCH}").fetchall()),
                        q(f"SELECT peer, from_id, msg_id, to_id, total, crc FROM {Table.FORGETS}").fetchall(),
                        {(d, p): Kept(f, e, m, bool(s)) for d, p, f, e, m, s in
                         q(f"SELECT dest, priority, first, epoch, mine, syncing FROM {Table.CUSTODY_OUT}")},
                        {(o, p): (e, bool(s)) for o, p, e, s in
                         q(f"SELECT origin, priority, epoch, syncing FROM {Table.CUSTODY_IN}")},
                        q(f"SELECT origin, priority, epoch, pseq, until FROM {Table.GAPS}").fetchall(),
                        q(f"SELECT origin, priority, epoch FROM {Table.RETIRED}").fetchall(), keys(Table.SEEN))

    # -- group commit ---------------------------------------------------------------------
    def apply(self, changes: list[Change]) -> None:
        """One pass's changes in one transaction: all committed, or none (and an exception)."""
        if not changes:
            return
        execute = self.conn.execute
        try:
            execute("BEGIN")
            for (sql, blob_write), run in itertools.groupby(changes, lambda c: (c.sql, isinstance(c, BlobWrite))):
                if blob_write:
                    for c in run:
                        rowid, offset, data = c.params
                        with self.conn.blobopen(sql, "data", rowid) as blob:
                            blob.seek(offset)
                            blob.write(data)
                else:  # a run of the same statement (the confirms of a recv_many, say) in one call
                    self.conn.executemany(sql, [c.params for c in run])
            execute("COMMIT")
        except BaseException as e:  # a value SQLite refuses too (OverflowError, say): nothing half done
            with contextlib.suppress(sqlite3.Error):
                execute("ROLLBACK")
            if getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
                raise CheckpointFull(f"checkpoint {self.path}: {e}") from None
            raise
        self.commits += 1

    def read_blob(self, stored: Stored, offset: int, n: int) -> bytes:
        """A piece of a text kept in the file (a large message), without reading the rest."""
        if stored.pieces:
            return _read_pieces(self.conn, stored.rowid, offset, n)
        with self.conn.blobopen(Table.TEXTS, "data", stored.rowid, readonly=True) as blob:
            blob.seek(offset)
            return blob.read(n)

    def find_send_done(self, req: str) -> tuple[int, str] | None:
        """The MSG_ID and TO_ID a SEND request got, if it was stored (a retry after a restart)."""
        row = self.conn.execute(f"SELECT msg_id, to_id FROM {Table.SEND_DONE} WHERE req = ?", (req,)).fetchone()
        return (row[0], row[1]) if row else None

    # -- space ------------------------------------------------------------------------------
    def free_bytes(self) -> int:
        st = os.statvfs(self.path.parent)
        return st.f_bavail * st.f_frsize

    def can_write(self, nbytes: int) -> bool:
        """A real write of `nbytes`, committed and taken back: does the disk take new messages again?"""
        try:
            self.apply([Change(f"INSERT OR REPLACE INTO {Table.META} VALUES ('probe', ?)", (b"\0" * nbytes,))])
            self.apply([Change(f"DELETE FROM {Table.META} WHERE key = 'probe'", ())])
            return True
        except (sqlite3.Error, CheckpointFull):  # (apply() turns SQLite's "full" into CheckpointFull)
            return False

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


_PIECES_READ = (f"SELECT off, data FROM {Table.PIECES} WHERE text = ?1 AND off < ?3 AND off >= coalesce("
                f"(SELECT max(off) FROM {Table.PIECES} WHERE text = ?1 AND off <= ?2), 0) ORDER BY off")


def _read_pieces(conn: sqlite3.Connection, text: int, offset: int, n: int) -> bytes:
    """Bytes offset..offset+n of a text kept in pieces: the piece that holds `offset` and those after it."""
    out = bytearray()
    for off, data in conn.execute(_PIECES_READ, (text, offset, offset + n)):
        out += data[max(0, offset - off):offset + n - off]
    return bytes(out)


def _rows(conn: sqlite3.Connection, table: Table) -> list[Row]:
    """A list's blocks in order. Texts in TEXTS or PIECES stay in the file: a Stored stands for them."""
    whole = f"(SELECT length(data) FROM {Table.TEXTS} x WHERE x.id = t.text)"
    pieces = f"(SELECT sum(length(data)) FROM {Table.PIECES} x WHERE x.text = t.text)"
    out = []
    for *r, text, size, in_pieces in conn.execute(
            f"SELECT {', '.join(f't.{c}' for c in MSGBLOK_COLUMNS)}, coalesce(a.acked, 0), coalesce(a.peer, ''), "
            f"t.text, coalesce({whole}, {pieces}, 0), {whole} IS NULL FROM {table} t "
            f"LEFT JOIN {Table.SEND_ACKED} a ON a.seq = t.seq ORDER BY t.seq"):
        row = Row(*r)
        out.append(dataclasses.replace(row, data=Stored(text, size, row.crc, bool(in_pieces))) if text else row)
    return out


def _waiting(conn: sqlite3.Connection) -> list[PendingSend]:
    return [PendingSend(*r) for r in conn.execute(f"SELECT {', '.join(WAITING_COLUMNS)} FROM {Table.WAIT_LIST} "
                                                  "ORDER BY seq")]


def _pairs_in(conn: sqlite3.Connection) -> dict[tuple[str, int], tuple[str, int]]:
    rows = conn.execute(f"SELECT origin, priority, epoch, expect FROM {Table.PAIR_IN}")
    return {(o, p): (e, n) for o, p, e, n in rows}


@contextlib.contextmanager
def _read_only(path: str | os.PathLike):
    """The file opened read-only: nothing is migrated or written, so it is safe beside a running
    daemon too (a WAL reader sees the last commit)."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} {'is empty' if path.is_file() else 'does not exist'}")
    try:
        conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
        try:
            yield conn
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e}") from None


def read_only_summary(path: str | os.PathLike) -> dict:
    """List lengths straight from the file, for `mccs status` while the daemon is down."""
    with _read_only(path) as conn:
        count = lambda t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: E731
        return {"send": count(Table.SEND_LIST), "recv": count(Table.RECV_LIST), "wait": count(Table.WAIT_LIST)}


@dataclass
class Lists:
    """The lists as last committed, read without a daemon (`mccs queue` while it is down)."""
    send_list: list[Row]
    recv_list: list[Row]
    wait_list: list[PendingSend]
    # (origin, priority) -> (epoch, expected pseq): which wait for order
    pairs_in: dict[tuple[str, int], tuple[str, int]]


def read_only_lists(path: str | os.PathLike) -> Lists:
    with _read_only(path) as conn:
        version = conn.execute(f"SELECT value FROM {Table.META} WHERE key = 'schema_version'").fetchone()
        if version is None or version[0] != str(SCHEMA_VERSION):
            raise CheckpointError(f"checkpoint {path} has schema version {version and version[0]!r}, not "
                                  f"{SCHEMA_VERSION}: start the daemon once to bring it up to date, then look again")
        return Lists(_rows(conn, Table.SEND_LIST), _rows(conn, Table.RECV_LIST), _waiting(conn), _pairs_in(conn))


def backup(path: str | os.PathLike, dest: str | os.PathLike, force: bool = False) -> int:
    """A consistent copy of the checkpoint at `dest`, taken while a daemon may be writing it:
    VACUUM INTO reads one snapshot (one read transaction in WAL mode, so the daemon's commits go
    on), into a temporary file beside `dest` that is synced and renamed into place, so `dest` is
    never a half copy. An existing `dest` is replaced only with `force`. The copy is marked: the
    daemon that opens it renews the host (`Checkpoint._renew_if_restored`). Returns its size."""
    dest = Path(dest)
    if dest.exists() and not force:
        raise FileExistsError(f"{dest} exists; give --force to replace it")
    _not_the_checkpoint(Path(path), dest)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    old_umask = os.umask(0o077)  # a backup holds the messages: owner-only, as the checkpoint
    try:
        with _read_only(path) as conn:
            conn.execute("VACUUM INTO ?", (str(tmp),))
        with contextlib.closing(sqlite3.connect(tmp)) as copy, copy:  # a daemon renews it when it opens it
            copy.execute(f"INSERT INTO {Table.META} (key, value) VALUES (?, ?)",
                         (RESTORED, time.strftime("%Y-%m-%dT%H:%M:%S%z")))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        if force:
            os.replace(tmp, dest)
        else:
            os.link(tmp, dest)  # fails if dest appeared meanwhile: never overwritten without --force
            os.unlink(tmp)
    except sqlite3.Error as e:
        raise CheckpointError(f"cannot back up checkpoint {path}: {e}") from None
    finally:
        os.umask(old_umask)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    dirfd = os.open(dest.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)
    return dest.stat().st_size


def _not_the_checkpoint(path: Path, dest: Path) -> None:
    """A backup may replace an older backup, never the checkpoint itself, the files SQLite keeps
    beside it, or anything that is not a regular file (a daemon's socket, a device)."""
    beside = [Path(f"{path}{suffix}") for suffix in ("", "-wal", "-shm", "-journal", ".lock")]
    if any(dest.exists() and f.exists() and os.path.samefile(dest, f) for f in beside) \
            or dest.resolve() in {f.resolve() for f in beside}:
        raise FileExistsError(f"{dest} is the checkpoint {path} or one of its files: a backup goes elsewhere")
    if dest.exists() and not dest.is_file():
        raise FileExistsError(f"{dest} is not a regular file: a backup replaces only an older backup")


COUNTED = (Table.SEND_LIST, Table.RECV_LIST, Table.WAIT_LIST, Table.DUP_WINDOW, Table.SEEN, Table.SENT_WINDOW,
           Table.KNOWN_HOSTS, Table.PARTIALS, Table.FORGETS, Table.PEER_EPOCH)


class CheckReport(TypedDict):
    """What check() finds (`mccs checkpoint check --json` prints it); the file's identity and
    counts only if it is a usable SQLite database."""
    path: str
    check: str  # the pragma: integrity_check or quick_check
    problems: list[str]  # empty when the file is fine
    host: NotRequired[str | None]
    epoch: NotRequired[str | None]
    schema_version: NotRequired[str | None]
    next_msg_id: NotRequired[str | None]
    counts: NotRequired[dict[str, int]]  # rows per table


def check(path: str | os.PathLike, quick: bool = False) -> CheckReport:
    """SQLite's integrity check (or quick_check), the checkpoint's identity and its tables' row
    counts, read-only (a daemon may be running). `problems` is empty when the file is fine."""
    with _read_only(path) as conn:
        pragma = "quick_check" if quick else "integrity_check"
        report: CheckReport = {"path": str(path), "check": pragma, "problems": []}
        try:
            result = [r[0] for r in conn.execute(f"PRAGMA {pragma}").fetchall()]
            meta = dict(conn.execute(f"SELECT key, value FROM {Table.META}").fetchall())
        except sqlite3.DatabaseError as e:
            report["problems"].append(f"not a usable SQLite database: {e}")
            return report
        if result != ["ok"]:
            report["problems"] += [f"integrity: {r}" for r in result[:10]]
        version = meta.get("schema_version")
        counts: dict[str, int] = {}
        report.update({"host": meta.get("host_id"), "epoch": meta.get("epoch"), "schema_version": version,
                       "next_msg_id": meta.get("next_msg_id"), "counts": counts})
        if version not in [str(v) for v in range(1, SCHEMA_VERSION + 1)]:
            report["problems"].append(f"schema version {version!r}: this MCCS reads 1 to {SCHEMA_VERSION}")
        tables = {t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in COUNTED:
            if table in tables:  # an older schema lacks the newer tables (the daemon adds them)
                counts[str(table)] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        return report


def _database(conn: sqlite3.Connection) -> sqlite_utils.Database:
    """sqlite-utils, for creating and migrating a checkpoint only: imported when needed, since it
    costs a daemon that opens an existing checkpoint some 6 MB and half a second at start. It
    imports numpy and pandas if it can, only to know their number types, which a checkpoint never
    holds: hidden from it while it loads (a new daemon's 49 MB were 30 without numpy)."""
    hidden = [name for name in ("numpy", "pandas") if name not in sys.modules]
    # None in sys.modules: `import numpy` fails there (documented by the import system; typeshed's
    # dict[str, ModuleType] has no room for it)
    sys.modules.update(dict.fromkeys(hidden))  # type: ignore[arg-type]
    try:
        import sqlite_utils
    finally:
        for name in hidden:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]
    return sqlite_utils.Database(conn)
