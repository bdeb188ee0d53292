"""WebSocket frames as pure functions: what wsproto makes, parsed here; what is
framed here, parsed by wsproto; a notification's method read off its first bytes."""

from __future__ import annotations

import pytest
import wsproto
from wsproto import ConnectionType
from wsproto.events import AcceptConnection, Request, TextMessage

from crw.host.frames import frame, notification_method, parse_head, xor_mask


def open_pair() -> tuple[wsproto.WSConnection, wsproto.WSConnection]:
    client = wsproto.WSConnection(ConnectionType.CLIENT)
    server = wsproto.WSConnection(ConnectionType.SERVER)
    server.receive_data(client.send(Request(host="localhost", target="/")))
    next(server.events())
    client.receive_data(server.send(AcceptConnection()))
    next(client.events())
    return client, server


@pytest.mark.parametrize("size", [0, 5, 125, 126, 65535, 65536, 200_000])
def test_a_masked_client_frame_is_parsed_and_unmasked(size: int) -> None:
    client, _ = open_pair()
    text = "é" * (size // 2) + "x" * (size % 2)
    data = client.send(TextMessage(data=text))
    head = parse_head(data)
    assert head is not None and head.whole_data and head.mask is not None
    assert head.end == len(data)
    assert xor_mask(data[head.start : head.end], head.mask).decode() == text
    assert parse_head(data[: head.start - 1]) is None


@pytest.mark.parametrize("size", [0, 125, 126, 65536])
def test_a_frame_made_here_is_what_wsproto_reads(size: int) -> None:
    """A server's frame unmasked, a client's masked: wsproto refuses either otherwise."""
    client, server = open_pair()
    client.receive_data(frame(b"x" * size))
    server.receive_data(frame("é".encode() * size, key=b"\x01\x82\x03\xf4"))
    for peer, text in ((client, "x" * size), (server, "é" * size)):
        (event,) = peer.events()
        assert isinstance(event, TextMessage) and event.data == text
        assert event.message_finished


@pytest.mark.parametrize(
    ("message", "method"),
    [
        (b'{"method":"item/started","params":{}}', b"item/started"),
        (b'{"id":1,"method":"item/started"}', None),
        (b'{"method":"a\\"b","params":{}}', None),
        (b'{"method":"' + b"x" * 100 + b'"}', None),
        (b'{"method": "item/started"}', None),
    ],
)
def test_a_notification_method_is_read_only_off_the_first_key(
    message: bytes, method: bytes | None
) -> None:
    assert notification_method(message, 0, len(message)) == method
