"""Checkpoint changes as data: what the daemon's core asks to be stored, applied by the shell.

The core never touches SQLite. It returns a list of `Change`s for a pass; the daemon applies
them in one transaction and commits before anything that depends on them leaves the daemon.
Each constructor here is the one place that knows a table's columns.
"""
from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple


class Table(StrEnum):
    META = "meta"
    SEND_LIST = "send_list"
    RECV_LIST = "recv_list"
    WAIT_LIST = "wait_list"
    SEND_DONE = "send_done"
    DUP_WINDOW = "dup_window"  # (origin, MSG_ID) keys received here: duplicates are dropped
    SEEN = "custody_seen"  # (origin, MSG_ID) keys received here in custody streams: what a restored origin asks
    SENT_WINDOW = "sent_window"  # (destination host, MSG_ID) keys sent from here: never reused too soon
    KNOWN_HOSTS = "known_hosts"  # every host ever learned by routing: a SEND to it is accepted and waits
    PAIR_OUT = "pair_out"  # per destination host and priority: the next end-to-end sequence number of this origin
    PAIR_IN = "pair_in"  # per origin host and priority: its epoch and the next end-to-end sequence number expected
    PARTIALS = "partials"  # large messages being received: how far each is (mccs.core.segments)
    TEXTS = "texts"  # texts over INLINE_MAX made here, in one row (a list's row names it in `text`)
    PIECES = "text_pieces"  # texts received in segments: the pieces as they came (a list's row names them in `text`)
    FORGETS = "forgets"  # transfers a next host holds the start of and will not get the rest of: to tell it
    SEND_ACKED = "send_acked"  # SEND_LIST blocks in segments: bytes the next host holds
    SEG_DONE = "seg_done"  # large messages received lately: a resent last segment is a duplicate
    PEER_EPOCH = "peer_epoch"  # per neighbour: the checkpoint epoch it last signed on with
    CUSTODY_OUT = "custody_out"  # per destination host and priority: this origin keeps copies from pseq `first`
    #                              (since the destination's `epoch`)
    CUSTODY_IN = "custody_in"  # per origin host and priority: its custody stream here (epoch), and whether syncing
    RETIRED = "retired_epochs"  # per origin host and priority: epochs its stream left here (replays are refused)
    GAPS = "e2e_gaps"  # per origin host, priority, epoch and PSEQ that came refused: until when its stream waits


MSGBLOK_COLUMNS = ("seq", "to_id", "from_id", "msg_id", "user_id", "data", "ts", "hops", "pseq", "epoch", "expires",
                   "flags", "crc", "priority", "seal")
WAITING_COLUMNS = ("req", "seq", "from_id", "to_id", "user_id", "data", "ttl", "flags", "priority")


#: A SEND_LIST row's stored-only flag (the wire's FLAGS byte has no bit free): a copy this origin
#: keeps after the next host acknowledged it, until the destination has it taken (mccs.core.custody).
CUSTODY = 0x100
#: Stored only too: one of this host's messages that goes without an end-to-end number (custody's
#: own, which need no order).
LOOSE = 0x200
#: Stored only too: one of this host's messages that had no end-to-end number when the backup this
#: host was restored from was taken; it may have left since. It waits until its destination says
#: whether it has had it (mccs.core.custody, "doubts").
DOUBT = 0x2000

INLINE_MAX = 65536  # a text longer than this is kept in the checkpoint only (Stored), not in memory


@dataclass(frozen=True)
class Stored:
    """A message text kept in the checkpoint only: row `rowid` of table TEXTS, or (`pieces`) the
    rows of PIECES with text = `rowid`, which a list's row names in its column `text`. The
    daemon's core never holds a large message whole; the shell reads it in pieces. Large texts
    live apart from the lists' rows because SQLite rewrites a whole row to change one column, and
    expands a zeroblob that is not a row's last column. A text received in segments stays in the
    pieces it came in: room is taken as they come, never for what has not come yet."""
    rowid: int
    size: int
    crc: int  # CRC-32 of the text
    pieces: bool = False  # in PIECES (received in segments), not in one row of TEXTS

    def __len__(self) -> int:
        return self.size


@dataclass(frozen=True)
class Row:
    """A MSGBLOK as stored: `seq` orders the lists and survives restarts."""
    seq: int
    to_id: str
    from_id: str
    msg_id: int
    user_id: int
    data: bytes | Stored
    ts: float
    hops: int = 0  # lines crossed so far (routed messages)
    pseq: int = 0  # end-to-end sequence number of (origin, destination); 0: none yet
    epoch: str = ""  # the origin checkpoint's epoch, with pseq
    expires: float = 0.0  # wall-clock time at this host after which it no longer waits; 0: never
    flags: int = 0  # mccs.core.envelope's RECEIPT, NOTICE, VOID
    crc: int = 0  # CRC-32 of a text longer than one frame (it goes in segments); 0 otherwise
    priority: int = 0  # 0 to 7: higher goes first
    seal: bytes = b""  # SEND_LIST: the end-to-end trailer its origin gave it, carried on as it came (mccs.core.e2e)
    acked: int = 0  # SEND_LIST: bytes of it the next host holds (a transfer in segments resumes there;
    #                 kept in SEND_ACKED, not in the row)
    acked_by: str = ""  # SEND_LIST: that next host ("" in a checkpoint from before schema version 8)


@dataclass(frozen=True)
class PendingSend:
    """A SEND PRQBLOK on WAIT_LIST (its list was full), kept so a retry finds it."""
    req: str
    seq: int
    from_id: str
    to_id: str
    user_id: int
    data: bytes
    ttl: float = 0.0  # seconds the message may wait once stored; 0: the host's ttl
    flags: int = 0  # RECEIPT asked
    priority: int = 0


class Change(NamedTuple):
    """One statement of a pass's transaction. A named tuple, not a frozen dataclass: the core
    makes a few a message, and a frozen dataclass costs three times as much to make."""
    sql: str
    params: tuple


class BlobWrite(Change):
    """Bytes written into a stored text at `offset` (SQLite incremental blob I/O), in the pass's
    transaction: sql names the table, params are (rowid, offset, data)."""
    __slots__ = ()


def _insert(table: Table, columns: tuple[str, ...], verb: str = "INSERT") -> str:
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({','.join('?' * len(columns))})"


_block_values = operator.attrgetter(*MSGBLOK_COLUMNS)
_DATA = MSGBLOK_COLUMNS.index("data")
_ADD_BLOCK = {table: _insert(table, (*MSGBLOK_COLUMNS, "text")) for table in (Table.SEND_LIST, Table.RECV_LIST)}


def add_block(table: Table, row: Row | Any) -> Change:
    """A MSGBLOK: a Row, or the core's block itself (anything with MSGBLOK_COLUMNS; no Row made a
    message). One whose text is Stored names it (the text is never copied); a trigger deletes the
    text with the row (store.py)."""
    values = _block_values(row)
    if isinstance(row.data, Stored):
        return Change(_ADD_BLOCK[table], (*values[:_DATA], b"", *values[_DATA + 1:], row.data.rowid))
    return Change(_ADD_BLOCK[table], (*values, 0))


def add_text(rowid: int, data: bytes | memoryview, piece: int = 1 << 20) -> list[Change]:
    """A long text that is in memory, into TEXTS: room for it, then the text written in pieces,
    so SQLite never holds a copy of all of it."""
    data = memoryview(data)
    return [new_text(rowid, len(data)), *(write_blob(Table.TEXTS, rowid, i, data[i:i + piece])
                                          for i in range(0, len(data), piece))]


def new_text(rowid: int, size: int) -> Change:
    return Change(f"INSERT OR REPLACE INTO {Table.TEXTS} (id, data) VALUES (?, zeroblob(?))", (rowid, size))


def set_acked(seq: int, acked: int, peer: str) -> Change:
    """How much of a SEND_LIST block in segments the next host, `peer`, holds."""
    return Change(f"INSERT OR REPLACE INTO {Table.SEND_ACKED} (seq, acked, peer) VALUES (?, ?, ?)", (seq, acked, peer))


def delete_acked(seq: int) -> Change:
    return Change(f"DELETE FROM {Table.SEND_ACKED} WHERE seq = ?", (seq,))


def add_partial(pid: int, origin: str, msg_id: int, to_id: str, total: int, crc: int, ts: float,
                peer: str = "") -> Change:
    """A large message starts to arrive from `peer`; its text (PIECES with text = `pid`) grows
    piece by piece (add_piece): no room is taken for what has not come."""
    return Change(f"INSERT OR REPLACE INTO {Table.PARTIALS} (id, origin, msg_id, to_id, total, crc, got, run, ts, "
                  "peer) VALUES (?, ?, ?, ?, ?, ?, 0, 0, ?, ?)", (pid, origin, msg_id, to_id, total, crc, ts, peer))


def add_piece(text: int, offset: int, data: bytes | memoryview) -> Change:
    """A piece of a text received in segments, at `offset` (pieces follow one another, no overlap)."""
    return Change(f"INSERT OR REPLACE INTO {Table.PIECES} (text, off, data) VALUES (?, ?, ?)", (text, offset, data))


def write_blob(table: Table, rowid: int, offset: int, data: bytes | memoryview) -> BlobWrite:
    return BlobWrite(str(table), (rowid, offset, data))


def set_partial_got(pid: int, got: int, run: int, ts: float = 0.0, peer: str = "") -> Change:
    """How far a partial is, when its last piece came and from which next host: the one that counts on it."""
    return Change(f"UPDATE {Table.PARTIALS} SET got = ?, run = ?, ts = ?, peer = ? WHERE id = ?",
                  (got, run, ts, peer, pid))


def delete_partial(pid: int, keep_text: bool = False) -> list[Change]:
    """A partial done with: its text too, unless a list's row now names it."""
    out = [Change(f"DELETE FROM {Table.PARTIALS} WHERE id = ?", (pid,))]
    if not keep_text:
        out.append(Change(f"DELETE FROM {Table.PIECES} WHERE text = ?", (pid,)))
    return out


def add_forget(peer: str, from_id: str, msg_id: int, to_id: str, total: int, crc: int) -> Change:
    """`peer` holds the start of a transfer that will not go on there: it is told so (mccs.core.segments.Forgets)."""
    return Change(f"INSERT OR REPLACE INTO {Table.FORGETS} (peer, from_id, msg_id, to_id, total, crc) "
                  "VALUES (?, ?, ?, ?, ?, ?)", (peer, from_id, msg_id, to_id, total, crc))


def delete_forget(peer: str, from_id: str, msg_id: int) -> Change:
    return Change(f"DELETE FROM {Table.FORGETS} WHERE peer = ? AND from_id = ? AND msg_id = ?", (peer, from_id, msg_id))


def add_seg_done(origin: str, msg_id: int, to_id: str, total: int, crc: int, seq: int) -> Change:
    return Change(f"INSERT OR REPLACE INTO {Table.SEG_DONE} (origin, msg_id, to_id, total, crc, seq) "
                  "VALUES (?, ?, ?, ?, ?, ?)", (origin, msg_id, to_id, total, crc, seq))


def delete_seg_done(origin: str, msg_id: int) -> Change:
    return Change(f"DELETE FROM {Table.SEG_DONE} WHERE origin = ? AND msg_id = ?", (origin, msg_id))


def set_void(table: Table, seq: int, flags: int, data: bytes = b"", expires: float = 0.0) -> Change:
    """An expired block that keeps its place in its pair's order: its text goes (a void's text is
    at most the reason code of the notice it owes, mccs.core.notices), and its own expiry."""
    return Change(f"UPDATE {table} SET data = ?, text = 0, seal = x'', expires = ?, flags = ? WHERE seq = ?",
                  (data, expires, flags, seq))


def set_flags(table: Table, seq: int, flags: int) -> Change:
    """A block's flags (the operator's hold is one of them, so it survives a restart)."""
    return Change(f"UPDATE {table} SET flags = ? WHERE seq = ?", (flags, seq))


def set_pseq(table: Table, seq: int, pseq: int, epoch: str) -> Change:
    """A block's end-to-end number, given when it first leaves on a routing line."""
    return Change(f"UPDATE {table} SET pseq = ?, epoch = ? WHERE seq = ?", (pseq, epoch, seq))


def delete_block(table: Table, seq: int) -> Change:
    return Change(f"DELETE FROM {table} WHERE seq = ?", (seq,))


def set_meta(key: str, value: str | int) -> Change:
    return Change(f"INSERT OR REPLACE INTO {Table.META} (key, value) VALUES (?, ?)", (key, str(value)))


def add_waiting(p: PendingSend) -> Change:
    return Change(_insert(Table.WAIT_LIST, WAITING_COLUMNS, "INSERT OR REPLACE"), dataclasses.astuple(p))


def delete_waiting(req: str) -> Change:
    return Change(f"DELETE FROM {Table.WAIT_LIST} WHERE req = ?", (req,))


def send_done(req: str, seq: int, msg_id: int, to_id: str) -> Change:
    return Change(f"INSERT OR REPLACE INTO {Table.SEND_DONE} (req, seq, msg_id, to_id) VALUES (?,?,?,?)",
                  (req, seq, msg_id, to_id))


def trim_send_done(keep: int) -> Change:
    return Change(f"DELETE FROM {Table.SEND_DONE} WHERE seq < (SELECT seq FROM {Table.SEND_DONE} "
                  "ORDER BY seq DESC LIMIT 1 OFFSET ?)", (keep,))


def add_key(table: Table, host: str, msg_id: int, seq: int) -> Change:
    """A key of the duplicate window (host = origin) or of the sent window (host = destination)."""
    return Change(f"INSERT OR REPLACE INTO {table} (host, msg_id, seq) VALUES (?,?,?)", (host, msg_id, seq))


def delete_key(table: Table, host: str, msg_id: int) -> Change:
    return Change(f"DELETE FROM {table} WHERE host = ? AND msg_id = ?", (host, msg_id))


def delete_keys(table: Table, host: str) -> Change:
    """Every key of one host: its checkpoint was started afresh (mccs.core.epochs)."""
    return Change(f"DELETE FROM {table} WHERE host = ?", (host,))


def set_peer_epoch(host: str, epoch: str) -> Change:
    return Change(f"INSERT OR REPLACE INTO {Table.PEER_EPOCH} (host, epoch) VALUES (?, ?)", (host, epoch))


def add_known_host(host: str) -> Change:
    return Change(f"INSERT OR IGNORE INTO {Table.KNOWN_HOSTS} (host) VALUES (?)", (host,))


def set_pair_out(dest: str, priority: int, next_pseq: int) -> Change:
    return Change(f"INSERT OR REPLACE INTO {Table.PAIR_OUT} (dest, priority, next) VALUES (?, ?, ?)",
                  (dest, priority, next_pseq))


def set_pair_in(origin: str, priority: int, epoch: str, expect: int) -> Change:
    return Change(f"INSERT OR REPLACE INTO {Table.PAIR_IN} (origin, priority, epoch, expect) VALUES (?, ?, ?, ?)",
                  (origin, priority, epoch, expect))


@dataclass
class Kept:
    """A stream (destination, priority) this origin keeps custody copies of (mccs.core.custody)."""
    first: int  # the first PSEQ kept
    epoch: str  # the destination's epoch when custody began
    mine: str = ""  # the epoch the stream is numbered under: "" this host's, else the one it had before a restore
    syncing: bool = False  # restored from a backup: no new number before the destination says how far it got


def set_custody_out(dest: str, priority: int, kept: Kept) -> Change:
    """This origin keeps a copy of each message for (dest, priority) from pseq `kept.first` until it
    is taken there (mccs.core.custody)."""
    return Change(f"INSERT OR REPLACE INTO {Table.CUSTODY_OUT} (dest, priority, first, epoch, mine, syncing) "
                  "VALUES (?, ?, ?, ?, ?, ?)", (dest, priority, kept.first, kept.epoch, kept.mine, int(kept.syncing)))


def set_gap(origin: str, priority: int, epoch: str, pseq: int, until: float) -> Change:
    """A numbered message came refused (mccs.core.e2e): its stream waits for the genuine one until then."""
    return Change(f"INSERT OR REPLACE INTO {Table.GAPS} (origin, priority, epoch, pseq, until) VALUES (?, ?, ?, ?, ?)",
                  (origin, priority, epoch, pseq, until))


def retire_epoch(origin: str, priority: int, epoch: str) -> Change:
    """The stream from `origin` went on under a new epoch: a protected message of this one is a replay."""
    return Change(f"INSERT OR IGNORE INTO {Table.RETIRED} (origin, priority, epoch) VALUES (?, ?, ?)",
                  (origin, priority, epoch))


def delete_gap(origin: str, priority: int, epoch: str, pseq: int) -> Change:
    return Change(f"DELETE FROM {Table.GAPS} WHERE origin = ? AND priority = ? AND epoch = ? AND pseq = ?",
                  (origin, priority, epoch, pseq))


def set_custody_in(origin: str, priority: int, epoch: str, syncing: bool) -> Change:
    """The origin keeps copies of its stream to this host (it probed it); `syncing`: this host was
    restored from a backup and waits for the origin's probe before it hands that stream on."""
    return Change(f"INSERT OR REPLACE INTO {Table.CUSTODY_IN} (origin, priority, epoch, syncing) VALUES (?, ?, ?, ?)",
                  (origin, priority, epoch, int(syncing)))


@dataclass
class Restored:
    """Everything the lists held at the last commit."""
    send_list: list[Row]
    recv_list: list[Row]
    wait_list: list[PendingSend]
    next_msg_id: int
    next_seq: int
    dup_keys: list[tuple[str, int]]  # (origin, MSG_ID) received, oldest first
    sent_keys: list[tuple[str, int]]  # (destination host, MSG_ID) sent, oldest first
    epoch: str
    known_hosts: list[str] = field(default_factory=list)
    pairs_out: dict[tuple[str, int], int] = field(default_factory=dict)  # (destination host, priority) -> next pseq
    # (origin host, priority) -> (epoch, expected pseq)
    pairs_in: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    partials: list[tuple] = field(default_factory=list)  # (id, origin, msg_id, to_id, total, crc, got, run, ts, peer)
    seg_done: list[tuple] = field(default_factory=list)  # (origin, msg_id, to_id, total, crc), oldest first
    peer_epochs: dict[str, str] = field(default_factory=dict)  # neighbour -> the epoch it last signed on with
    forgets: list[tuple] = field(default_factory=list)  # (peer, from_id, msg_id, to_id, total, crc) still to tell
    custody_out: dict[tuple[str, int], Kept] = field(default_factory=dict)
    custody_in: dict[tuple[str, int], tuple[str, bool]] = field(default_factory=dict)  # -> (epoch, syncing)
    gaps: list[tuple[str, int, str, int, float]] = field(default_factory=list)  # (origin, priority, epoch, pseq, until)
    retired: list[tuple[str, int, str]] = field(default_factory=list)  # (origin, priority, epoch)
    seen_keys: list[tuple[str, int]] = field(default_factory=list)  # (origin, MSG_ID) come in custody streams
