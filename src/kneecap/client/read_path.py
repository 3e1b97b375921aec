"""Which way this client reads streamed bodies, decided once per Client from what aiohttp exposes.

Owns: the read paths' names (what summary.json's `client.read_path` says), the check that the
installed aiohttp still has every attribute the body tap (body_tap.py) touches, and a tiny
keep-alive SSE server on a loopback socket that the driver's self-test streams two answers from.
Does not read bodies (driver.py, body_tap.py) or decide anything per stream (a stream that is not
chunked, compressed or over TLS still goes through aiohttp's reader whatever the path).
"""

from __future__ import annotations

import asyncio

TAP_KERNEL = "body_tap+kernel_stamps"  # the tap reads, each read stamped with the kernel's receive time
TAP = "body_tap"  # the tap reads, each read stamped when the event loop handles it
AIOHTTP = "aiohttp"  # aiohttp's own StreamReader reads (stamped when the event loop handles it)

# what body_tap.py and driver._read_stream use of aiohttp: (module, class, attribute)
_TAP_HOOKS = (
    ("aiohttp", "ClientResponse", "connection"),  # the response's Connection
    ("aiohttp.connector", "Connection", "protocol"),  # its ResponseHandler
    ("aiohttp.client_proto", "ResponseHandler", "transport"),  # the asyncio transport the tap swaps protocols on
    ("aiohttp.client_proto", "ResponseHandler", "data_received"),  # the terminal chunk is handed back here
    ("aiohttp.client_proto", "ResponseHandler", "eof_received"),
    ("aiohttp.client_proto", "ResponseHandler", "connection_lost"),
    ("aiohttp.client_proto", "ResponseHandler", "pause_writing"),
    ("aiohttp.client_proto", "ResponseHandler", "resume_writing"),
    ("aiohttp", "StreamReader", "is_eof"),
    ("aiohttp", "StreamReader", "read_nowait"),  # body bytes that came with the headers
    ("aiohttp", "StreamReader", "readany"),
    ("aiohttp", "StreamReader", "set_exception"),
)


def missing_tap_hooks() -> list[str]:
    """The aiohttp attributes the tap needs that this aiohttp does not have (empty: all there)."""
    import importlib

    missing = []
    for module, cls, attr in _TAP_HOOKS:
        try:
            owner = getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError):
            missing.append(f"{module}.{cls}")
            continue
        if not hasattr(owner, attr):
            missing.append(f"{cls}.{attr}")
    return missing


PROBE_TOKENS = 3  # tokens in each self-test answer, one per chunk


CHUNK_GAP_S = 0.001  # between the self-test's chunks: the tap is in place before most of the body arrives


def probe_chunks() -> list[bytes]:
    """The self-test answer's body: PROBE_TOKENS completion events, [DONE], the terminal chunk."""
    events = [b'data: {"choices":[{"index":0,"text":"t%d","finish_reason":null}]}\n\n' % i for i in range(PROBE_TOKENS)]
    events.append(b"data: [DONE]\n\n")
    return [b"%x\r\n%s\r\n" % (len(e), e) for e in events] + [b"0\r\n\r\n"]


_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Connection: keep-alive\r\n\r\n"
)


class LoopbackSse:
    """A keep-alive HTTP/1.1 server on 127.0.0.1 answering every request with PROBE_TOKENS chunked
    SSE completion events and [DONE], the head and each chunk written separately (as a server streams).

        async with LoopbackSse() as srv:   # srv.url, srv.connections
    """

    def __init__(self) -> None:
        self.connections = 0
        self._server: asyncio.AbstractServer | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self.url = ""

    async def __aenter__(self) -> "LoopbackSse":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc) -> None:
        self._server.close()
        for w in self._writers:
            w.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        chunks = probe_chunks()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                writer.write(_HEAD)
                for chunk in chunks:  # chunk by chunk, as a server streams: several reads, not one
                    await writer.drain()
                    await asyncio.sleep(CHUNK_GAP_S)
                    writer.write(chunk)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()
