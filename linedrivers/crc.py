"""The frame checks, from crcmod's predefined table (C extension when built)."""
from __future__ import annotations

import crcmod.predefined

#: Async FCS: CRC-16/X-25 over KIND..body, sent low byte first. Check value 0x906E.
x25 = crcmod.predefined.mkCrcFun("x-25")
#: Async FCS of long frames with FEAT=FCS32: CRC-32 (IEEE 802.3), sent low byte first. Check value 0xCBF43926.
crc32 = crcmod.predefined.mkCrcFun("crc-32")
#: BSC BCC: CRC-16 (x^16+x^15+x^2+1, reflected, init 0), sent low byte first. Check value 0xBB3D.
crc16 = crcmod.predefined.mkCrcFun("crc-16")


def le16(value: int) -> bytes:
    """A check value as sent on the line: low byte first."""
    return value.to_bytes(2, "little")
