"""Forward error correction of long async data frames (FEAT=FEC, docs/PROTOCOL.md).

On a noisy line most damaged frames have one or two bad bytes. Selective repeat sends such a
frame again whole; Reed-Solomon parity lets the receiver mend it instead, for 4 bytes in every
255, so frames can stay long (little overhead) where without it they must be short (little to
resend). An F frame is a D frame whose unstuffed content (KIND SEQ ACK body CRC-32, KIND = 'F')
is cut in codewords of 251 bytes, each followed by its 4 parity bytes (RS(255,251) over GF(2^8),
reedsolo's defaults: primitive polynomial 0x11d, first consecutive root 0; the last codeword
shortened). It mends up to 2 damaged bytes a codeword; the CRC-32 still decides what is taken.
"""
from __future__ import annotations

from typing import Callable

from reedsolo import ReedSolomonError, RSCodec

#: Parity bytes a codeword: mends NSYM // 2 damaged bytes in each.
NSYM = 4
CODEWORD = 255
DATA = CODEWORD - NSYM
KIND = ord("F")
_codec = RSCodec(NSYM, nsize=CODEWORD)


def protect(content: bytes) -> bytes:
    """`content` with its parity: every DATA bytes followed by NSYM bytes."""
    return bytes(_codec.encode(content))


def coded_size(n: int) -> int:
    """Bytes of `n` bytes once protected."""
    return n + NSYM * -(-n // DATA)


def recover(coded: bytes, ok: Callable[[bytes], bool]) -> tuple[bytes, int] | None:
    """The content of a protected frame and how many bytes were mended, or None when it cannot be
    mended into content that `ok` (the CRC check) accepts. The parity is only decoded when the
    content as received fails the check, so an undamaged frame costs a slice and a CRC."""
    if len(coded) % CODEWORD and len(coded) % CODEWORD <= NSYM:
        return None  # no codeword is that short: a damaged frame
    content = b"".join(coded[i:i + CODEWORD][:-NSYM] for i in range(0, len(coded), CODEWORD))
    if ok(content):
        return content, 0
    try:
        mended, _, errata = _codec.decode(coded)
    except ReedSolomonError:
        return None
    return (bytes(mended), len(errata)) if ok(bytes(mended)) else None
