"""Line drivers: the message image and sans-I/O state machines for async and BSC lines."""
from .events import (Event, FrameTraced, LineDown, LineEvent, LineUp, MessageAcked,
                     MessageReceived, PeerRefused)

__all__ = ["AsyncLine", "BscLine", "Event", "FrameTraced", "LineDown", "LineEvent", "LineUp",
           "MessageAcked", "MessageReceived", "PeerRefused"]


def __getattr__(name):  # the machines load lazily, so each module can be built on its own
    if name == "AsyncLine":
        from .async_line import AsyncLine
        return AsyncLine
    if name == "BscLine":
        from .bsc_line import BscLine
        return BscLine
    raise AttributeError(name)
