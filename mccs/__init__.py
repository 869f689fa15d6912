"""MCCS: SEND and RECV between processes on computers joined by serial lines."""
from mccs.client import (RECV, SEND, Client, DaemonUnreachable, MCCSError, Message, Refused, attach,
                     connect)

__all__ = ["RECV", "SEND", "Client", "DaemonUnreachable", "MCCSError", "Message", "Refused",
           "attach", "connect"]
