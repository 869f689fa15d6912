"""Epochs: which incarnation of a neighbour's checkpoint is at the other end of a line.

Every checkpoint gets a random epoch when it is created (and keeps it across restarts); a host
started afresh (`mccs daemon --new-checkpoint`) has a new one, counts its MSG_IDs and end-to-end
numbers from 1 again, and remembers nothing it received. It offers the epoch at every sign-on
(EPOCH=, docs/PROTOCOL.md); a neighbour keeps the one it last saw in its checkpoint, and a
different one tells it to forget what it kept of the old incarnation (Lines.peer_renewed): the
duplicate window of its MSG_IDs, the ids sent to it, the numbering towards it, partial transfers.
A peer that sends no epoch (an older MCCS) changes nothing.
"""
from __future__ import annotations

from checkpoint import changes as ch
from checkpoint.changes import Change


class PeerEpochs:
    """The epoch each neighbour last signed on with, mirrored in the checkpoint (PEER_EPOCH)."""

    def __init__(self, known: dict[str, str]):
        self.known = dict(known)

    def signed_on(self, peer: str, epoch: str) -> tuple[bool, list[Change]]:
        """Was `peer` started afresh since it last signed on here? And the change that stores its
        epoch. The first epoch heard from a peer is only stored: there is nothing to compare."""
        old = self.known.get(peer)
        if not epoch or old == epoch:
            return False, []
        self.known[peer] = epoch
        return old is not None, [ch.set_peer_epoch(peer, epoch)]
