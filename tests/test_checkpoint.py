"""The checkpoint's duplicate window: which (origin, MSG_ID) keys count as already received."""
from __future__ import annotations

import pytest

from checkpoint.store import DUP_WINDOW, Checkpoint

pytestmark = pytest.mark.timeout(60)


def _received(cp: Checkpoint, origin: str, *ids: int) -> None:
    with cp.transaction():
        for msg_id in ids:
            cp.add_dup_key(origin, msg_id)


def test_window_follows_the_origins_id_space_not_the_count_received_here(tmp_path):
    """An origin that sends mostly to other hosts reuses its ids after a wrap: a key this host
    saw 65,535 ids ago is a new message, however few keys came from that origin since."""
    cp = Checkpoint(tmp_path / "BB.db", "BB")
    cp.restore()
    _received(cp, "AA", 1, 2, 3)
    _received(cp, "CC", 1)
    assert cp.is_duplicate("AA", 2) and cp.is_duplicate("CC", 1) and not cp.is_duplicate("AA", 4)
    _received(cp, "AA", 1 + DUP_WINDOW)  # a window's length of ids later: 1 leaves, 2 and 3 stay
    assert not cp.is_duplicate("AA", 1) and cp.is_duplicate("AA", 2) and cp.is_duplicate("AA", 3)
    _received(cp, "AA", 40000, 65535)
    assert not any(cp.is_duplicate("AA", i) for i in (2, 3, 1 + DUP_WINDOW, 40000))
    _received(cp, "AA", 1)  # the origin's counter wrapped: 65535 is one id behind 1
    assert cp.is_duplicate("AA", 1) and cp.is_duplicate("AA", 65535) and cp.is_duplicate("CC", 1)
    cp.close()
    again = Checkpoint(tmp_path / "BB.db", "BB")
    again.restore()  # the window is durable
    assert again.is_duplicate("AA", 1) and again.is_duplicate("AA", 65535) and not again.is_duplicate("AA", 2)
    again.close()
