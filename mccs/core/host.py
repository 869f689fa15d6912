"""What the parts of one host's core share, with one owner: the Kernel builds a HostState and
hands it to the Process-Dispatcher, the Message-Receiver, the Line Control Blocks (Lines), the
notices, control, delivery and the queue, instead of a dozen arguments to each. Each part keeps
the fields it uses under their usual names, so its code reads as before."""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

from mccs.config import HostConfig
from mccs.core.e2e import Keyring
from mccs.core.lists import Lists, Sequence
from mccs.core.msgids import MsgIds
from mccs.core.pairs import Pairs
from mccs.core.routing import RoutingTable
from mccs.core.segments import Blobs


@dataclass(eq=False)
class HostState:
    cfg: HostConfig  # the host's configuration: its id, limits and lines
    lists: Lists  # WAIT_LIST, SEND_LIST, RECV_LIST
    ids: MsgIds  # this host's MSG_IDs
    seqs: Sequence  # the lists' order (seq), across restarts
    pairs: Pairs  # end-to-end numbering as an origin and as a destination
    routes: RoutingTable
    blobs: Blobs  # large texts, read from the checkpoint
    counters: collections.Counter = field(default_factory=collections.Counter)  # the host's, in `mccs status`
    keys: Keyring = field(default_factory=lambda: Keyring(""))  # its end-to-end keys (updated in place on reload)

    @property
    def id(self) -> str:
        return self.cfg.id
