"""The client side: the library processes use (`mccs.connect`, SEND, RECV) and the socket's
framer (ipc), which the daemon's server uses too."""
from mccs.client.library import (GRACE, RECV, SEND, Client, DaemonUnreachable, MCCSError, Message, NotStored,
                                 Refused, attach, connect)

__all__ = ["GRACE", "RECV", "SEND", "Client", "DaemonUnreachable", "MCCSError", "Message", "NotStored", "Refused",
           "attach", "connect"]
