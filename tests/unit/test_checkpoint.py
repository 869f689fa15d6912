"""The checkpoint file and the MSG_ID windows it keeps: migration, atomic passes, refusals."""
from __future__ import annotations

import sqlite3

import pytest

from checkpoint import changes as ch
from checkpoint.changes import Row, Stored, Table
from checkpoint.store import SCHEMA_VERSION, Checkpoint, CheckpointError
from mccs.core.msgids import DUP_WINDOW, ID_SPACE, MAX_IN_USE, KeyWindow, MsgIds

pytestmark = pytest.mark.timeout(60)


def _version_1(path, host: str) -> None:
    """A checkpoint as MCCS 0.1 wrote it (schema 1): no sent window, no epoch, dup_window.origin."""
    conn = sqlite3.connect(path)
    blok = "seq INTEGER PRIMARY KEY, to_id TEXT, from_id TEXT, msg_id INTEGER, user_id INTEGER, data BLOB, ts FLOAT"
    conn.executescript(f"""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE send_list ({blok});
        CREATE TABLE recv_list ({blok});
        CREATE TABLE wait_list (req TEXT PRIMARY KEY, seq INTEGER, from_id TEXT, to_id TEXT, user_id INTEGER,
                                data BLOB);
        CREATE TABLE send_done (req TEXT PRIMARY KEY, seq INTEGER, msg_id INTEGER, to_id TEXT);
        CREATE TABLE dup_window (origin TEXT, msg_id INTEGER, seq INTEGER, PRIMARY KEY (origin, msg_id));
        INSERT INTO meta VALUES ('schema_version', '1'), ('host_id', '{host}'), ('next_msg_id', '4'),
                                ('next_seq', '9');
        INSERT INTO send_list VALUES (5, 'BBRCV ', 'AASND ', 3, 7, X'6869', 1.5);
        INSERT INTO send_done VALUES ('r1', 1, 1, 'BBRCV '), ('r2', 2, 2, 'AALOC '), ('r3', 3, 3, 'BBRCV ');
        INSERT INTO dup_window VALUES ('CC', 17, 4), ('CC', 18, 6);
    """)
    conn.commit()
    conn.close()


def test_a_version_1_checkpoint_is_migrated_and_keeps_every_message(tmp_path):
    path = tmp_path / "AA.db"
    _version_1(path, "AA")
    cp = Checkpoint(path, "AA")
    state = cp.restore()
    assert [(r.seq, r.to_id, r.msg_id, r.data) for r in state.send_list] == [(5, "BBRCV ", 3, b"hi")]
    assert (state.next_msg_id, state.next_seq) == (4, 9)
    assert state.dup_keys == [("CC", 17), ("CC", 18)]
    # the ids already given to BB are seeded into the sent window; a local message's is not
    assert state.sent_keys == [("BB", 1), ("BB", 3)]
    assert len(state.epoch) == 8
    cp.close()
    again = Checkpoint(path, "AA")  # opens as version 2 now, nothing migrated twice
    assert again.restore().sent_keys == [("BB", 1), ("BB", 3)]
    version = again.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    assert version == str(SCHEMA_VERSION)
    again.close()


def test_a_pass_is_stored_whole_or_not_at_all(tmp_path):
    cp = Checkpoint(tmp_path / "AA.db", "AA")
    row = Row(1, "BBRCV ", "AASND ", 1, 0, b"x", 0.0)
    with pytest.raises(sqlite3.IntegrityError):
        cp.apply([ch.add_block(Table.SEND_LIST, row), ch.add_block(Table.SEND_LIST, row)])  # the same seq twice
    assert cp.restore().send_list == []
    cp.apply([ch.add_block(Table.SEND_LIST, row), ch.set_meta("next_msg_id", 2)])
    cp.close()
    state = Checkpoint(tmp_path / "AA.db", "AA").restore()
    assert state.send_list == [row] and state.next_msg_id == 2


def test_the_checkpoint_of_another_host_is_refused(tmp_path):
    Checkpoint(tmp_path / "AA.db", "AA").close()
    with pytest.raises(CheckpointError, match="belongs to host 'AA'"):
        Checkpoint(tmp_path / "AA.db", "BB")


def test_a_checkpoint_is_opened_by_one_daemon_at_a_time(tmp_path):
    first = Checkpoint(tmp_path / "AA.db", "AA")
    with pytest.raises(CheckpointError, match="in use by another daemon"):
        Checkpoint(tmp_path / "AA.db", "AA")
    first.close()
    Checkpoint(tmp_path / "AA.db", "AA").close()


def test_new_checkpoint_moves_leftovers_aside_and_never_replaces_a_store(tmp_path):
    path = tmp_path / "AA.db"
    cp = Checkpoint(path, "AA")
    cp.apply([ch.set_meta("next_msg_id", 77)])
    cp.close()
    with pytest.raises(CheckpointError, match="already holds a checkpoint"):
        Checkpoint(path, "AA", new=True)
    path.write_bytes(b"")  # truncated: refused unless asked for
    with pytest.raises(CheckpointError, match="--new-checkpoint"):
        Checkpoint(path, "AA")
    fresh = Checkpoint(path, "AA", new=True)
    assert fresh.restore().next_msg_id == 1
    fresh.close()
    assert len(list(tmp_path.glob("AA.db.*.old"))) == 1  # the emptied file, kept for the operator


def test_the_duplicate_window_keeps_the_last_keys_of_each_host():
    window = KeyWindow(Table.DUP_WINDOW)
    changes = []
    for msg_id in range(1, DUP_WINDOW + 3):
        changes += window.add("AA", msg_id, msg_id)
    window.add("CC", 1, 0)
    assert ("AA", 1) not in window and ("AA", 2) not in window and ("AA", 3) in window
    assert ("AA", DUP_WINDOW + 2) in window and ("CC", 1) in window
    deletes = [c.params for c in changes if c.sql.startswith("DELETE")]
    assert deletes == [("AA", 1), ("AA", 2)]  # the table follows the window exactly
    restored = KeyWindow(Table.DUP_WINDOW, [("AA", i) for i in range(1, DUP_WINDOW + 3)])
    assert ("AA", 2) not in restored and ("AA", 3) in restored


def test_a_msg_id_is_never_reused_while_in_use_or_in_the_receivers_window():
    ids = MsgIds("AA", next_id=ID_SPACE - 1)
    first, _ = ids.allocate("BB", 1)
    assert first == ID_SPACE - 1
    given = {first}
    for seq in range(2, DUP_WINDOW + 10):  # wraps past 65535 to 1
        msg_id, _ = ids.allocate("BB", seq)
        assert msg_id not in given or (seq > DUP_WINDOW and msg_id not in ids.in_use)
        given.add(msg_id)
    assert 1 in given and ID_SPACE in given
    for msg_id in list(ids.in_use):  # all delivered: still, the last DUP_WINDOW ids for BB stay barred
        ids.release(msg_id)
    recent = [m for (h, m) in ids.sent._set if h == "BB"]
    fresh, _ = ids.allocate("BB", 10**6)
    assert fresh not in recent
    local, changes = ids.allocate("AA", 10**6 + 1)  # a local message: no receiver window, no change stored
    assert changes == [] and local not in ids.in_use or ids.in_use[local] == 1


def test_while_too_many_ids_are_in_use_the_host_reports_full():
    ids = MsgIds("AA", next_id=1)
    for msg_id in range(1, MAX_IN_USE + 1):
        ids.hold(msg_id)
    assert ids.full
    ids.release(5)
    assert not ids.full
    msg_id, _ = ids.allocate("BB", 1)
    assert msg_id == 5 and ids.full  # the only free id that is not barred


@pytest.mark.parametrize("old", [False, True], ids=["new", "migrated from version 1"])
def test_a_long_text_lives_in_texts_is_read_in_pieces_and_goes_with_its_row(tmp_path, old):
    path = tmp_path / "AA.db"
    if old:
        _version_1(path, "AA")
    cp = Checkpoint(path, "AA")
    text = bytes(range(256)) * 1000
    stored = Stored(100, len(text), 7)
    cp.apply([*ch.add_text(100, text, piece=4096),
              ch.add_block(Table.SEND_LIST, Row(100, "BBRCV ", "AASND ", 9, 9, stored, 0.0, crc=7))])
    assert cp.read_blob(stored, 1000, 600) == text[1000:1600]
    row = next(r for r in cp.restore().send_list if r.seq == 100)
    assert row.data == stored and row.crc == 7
    cp.apply([ch.delete_block(Table.SEND_LIST, 100)])  # the trigger takes the text with the row
    assert cp.conn.execute("SELECT count(*) FROM texts").fetchone()[0] == 0
    cp.close()


def test_the_probe_of_a_full_disk_says_no_rather_than_raising(tmp_path, monkeypatch):
    """apply() reports SQLite's "full" as CheckpointFull: the daemon's probe of the disk took that
    for a failure of its own and never probed again, so a host stayed "disk full" after the disk
    had room again, until restarted (an adversarial test on a 1 MiB tmpfs)."""
    from checkpoint.store import CheckpointFull
    cp = Checkpoint(tmp_path / "AA.db", "AA")

    def full(changes):
        raise CheckpointFull("database or disk is full")
    monkeypatch.setattr(cp, "apply", full)
    assert cp.can_write(4096) is False
    monkeypatch.undo()
    assert cp.can_write(4096) is True
    cp.close()


def test_an_empty_file_no_daemon_used_becomes_the_checkpoint(tmp_path):
    """`touch AA.db` before the first start: refused as "used before" (by the lock file the same
    start had just made), and then refused for good (an adversarial test). An empty file beside
    the lock of an earlier daemon is still refused: that one lost its checkpoint."""
    path = tmp_path / "AA.db"
    path.touch()
    cp = Checkpoint(path, "AA")
    assert cp.restore().next_msg_id == 1
    cp.close()
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="is empty, but a daemon used it before"):
        Checkpoint(path, "AA")
