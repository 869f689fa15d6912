"""What a line's framing costs in time: the port's gathers and the daemon's holds count with it."""


def char_time(baudrate: float, bytesize: int = 8, parity: str = "N", stopbits: float = 1) -> float:
    """Seconds a byte takes on the wire: start bit, data bits, parity, stop bits."""
    return (1 + bytesize + (parity != "N") + stopbits) / baudrate
