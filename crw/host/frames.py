"""WebSocket frames (RFC 6455, section 5.2) as pure functions over bytes, and the
method of a notification read off its first bytes.

The transport hands wsproto the handshake, control frames and fragmented
messages, and does the common case itself: a whole, unfragmented data frame. A
busy connection carries ten or more notifications a call, and wsproto's
per-frame events, generators and incremental UTF-8 decoder cost more than the
frame's JSON does. No extension is ever negotiated (neither side offers one), so
the RSV bits of a data frame are always zero.
"""

from __future__ import annotations

from dataclasses import dataclass

FIN = 0x80
CONTINUATION = 0x0
TEXT = 0x1
BINARY = 0x2
MASKED = 0x80

NOTIFICATION_START = b'{"method":"'
"""How codex 0.163 and the simulated host begin a notification: `method` first,
no space (seen on the wire; host-protocol.md, Wire)."""
LONGEST_METHOD = 80
"""A method name is short; a quote further than this is not the end of one."""


@dataclass(frozen=True, slots=True)
class Head:
    """One frame's header: its first byte (FIN, RSV, opcode), where its payload
    starts and ends in the buffer, and its masking key (None: not masked)."""

    first: int
    start: int
    end: int
    mask: bytes | None

    @property
    def whole_data(self) -> bool:
        """A whole text or binary message in one frame, no RSV bit set."""
        return self.first in (FIN | TEXT, FIN | BINARY)


def parse_head(buffer: bytes | bytearray) -> Head | None:
    """The header of the frame at the start of `buffer`; None until the whole
    header is there (the payload may not be yet: compare `end` to the length)."""
    size = len(buffer)
    if size < 2:
        return None
    second = buffer[1]
    length, start = second & 0x7F, 2
    if length == 126:
        if size < 4:
            return None
        length, start = int.from_bytes(buffer[2:4], "big"), 4
    elif length == 127:
        if size < 10:
            return None
        length, start = int.from_bytes(buffer[2:10], "big"), 10
    mask = None
    if second & MASKED:
        if size < start + 4:
            return None
        mask, start = bytes(buffer[start : start + 4]), start + 4
    return Head(buffer[0], start, start + length, mask)


def xor_mask(payload: bytes, key: bytes) -> bytes:
    """`payload` masked with the 4-byte `key`, or unmasked: the same XOR (one
    big-integer XOR, as wsproto does)."""
    size = len(payload)
    if not size:
        return payload
    repeated = (key * (size // 4 + 1))[:size]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(size, "big")


def frame(payload: bytes, opcode: int = TEXT, key: bytes | None = None) -> bytes:
    """A final frame carrying `payload`: unmasked (what a server sends), or masked
    with the 4-byte `key` (what a client sends, a fresh random key a frame)."""
    size = len(payload)
    masked = MASKED if key is not None else 0
    if size < 126:
        head = bytes((FIN | opcode, masked | size))
    elif size < 1 << 16:
        head = bytes((FIN | opcode, masked | 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((FIN | opcode, masked | 127)) + size.to_bytes(8, "big")
    if key is None:
        return head + payload
    return head + key + xor_mask(payload, key)


def notification_method(buffer: bytes | bytearray, start: int, end: int) -> bytes | None:
    """The method of the notification in `buffer[start:end]` when the message
    begins `{"method":"<name>"` (a name with no escape in it); None otherwise,
    and then only decoding the message tells what it is."""
    if not buffer.startswith(NOTIFICATION_START, start):
        return None
    first = start + len(NOTIFICATION_START)
    quote = buffer.find(b'"', first, min(end, first + LONGEST_METHOD))
    if quote < 0:
        return None
    name = bytes(buffer[first:quote])
    return None if b"\\" in name else name
