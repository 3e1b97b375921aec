"""Reading a streamed (chunked) response body at the transport level: one timestamp per socket read.

Owns: taking a response's connection from aiohttp once aiohttp has parsed the headers (asyncio
`Transport.set_protocol`), decoding HTTP/1.1 chunked transfer coding (RFC 9112 section 7.1) and the
SSE stream inside it while stamping each read's arrival, then handing the connection back with the
terminal chunk so aiohttp's parser completes the message and the connection returns to the pool.
Also the stall watchdog (no byte for stall_s) used by both read paths.
Why: aiohttp's StreamReader wakes the request's coroutine once per read (a future, a task step and
per-HTTP-chunk buffer bookkeeping). Measured on the 2-core dev box, C=256, 500-token streams from a
Node server: the whole client spent 12.6 us of CPU per read with the tap against 19.6 us through
aiohttp's reader (and stamped ~40 % more, finer-grained reads). Whenever anything is unusual (not
chunked, compressed, TLS, a first read that does not start at a chunk boundary) the driver keeps
aiohttp's own reader, and so does a client whose aiohttp lacks what the tap touches or fails its
loopback self-test (client/read_path.py, checked once per client when it opens).
While a tap owns a connection, KernelStampedReader (Linux) reads the socket itself with recvmsg and
stamps each read with the kernel's receive time (SO_TIMESTAMPNS) rather than the moment the event
loop got to it; see its docstring and docs/metrics.md "How kneecap bench takes them".
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from typing import Callable

from kneecap.client.sse import SseEvent, SseParser

_new_event = tuple.__new__

_HEX = b"0123456789abcdefABCDEF"
_TERMINAL = b"0\r\n\r\n"


class ChunkError(Exception):
    """The body is not valid chunked transfer coding."""


class StallError(Exception):
    """No byte arrived for the stall timeout."""


class TruncatedError(Exception):
    """The connection closed before the terminal chunk."""


class ChunkDecoder:
    """Incremental decoder of chunked transfer coding; feed() returns the payload pieces."""

    __slots__ = ("_state", "_remaining", "_pending", "ended")
    _SIZE, _DATA, _DATA_CRLF, _TRAILER, _DONE = range(5)

    def __init__(self) -> None:
        self._state = self._SIZE
        self._remaining = 0
        self._pending = b""
        self.ended = False

    def at_chunk_start(self) -> bool:
        """True when the next byte starts a chunk-size line (no partial state held)."""
        return self._state == self._SIZE and not self._pending

    def _line_end(self, data: bytes, i: int, limit: int, what: str) -> int:
        """Where the CRLF ending the line at i is, or -1 with the line kept for the next read (at most limit bytes)."""
        j = data.find(b"\r\n", i)
        if j < 0:
            if len(data) - i > limit:
                raise ChunkError(f"{what} too long")
            self._pending = data[i:]
        return j

    def feed(self, data: bytes) -> list[bytes]:
        if self._pending:
            data = self._pending + data
            self._pending = b""
        out: list[bytes] = []
        i, n = 0, len(data)
        if self._state == self._SIZE:  # fast path: whole "size CRLF data CRLF" chunks, plain hex sizes
            find = data.find
            while True:
                j = find(b"\r\n", i)
                if j < 0:
                    break
                digits = data[i:j]
                if not digits or len(digits) > 16 or digits.strip(_HEX):  # extensions, junk: the loop below decides
                    break
                size = int(digits, 16)
                end = j + 2 + size
                if not size or end + 2 > n or data[end : end + 2] != b"\r\n":
                    break
                out.append(data[j + 2 : end])
                i = end + 2
        while i < n:
            state = self._state
            if state == self._DATA:
                take = self._remaining if self._remaining < n - i else n - i
                out.append(data[i : i + take] if (i or take != n) else data)
                i += take
                self._remaining -= take
                if not self._remaining:
                    self._state = self._DATA_CRLF
            elif state == self._DATA_CRLF:
                if n - i < 2:
                    self._pending = data[i:]
                    break
                if data[i : i + 2] != b"\r\n":
                    raise ChunkError("chunk data not followed by CRLF")
                i += 2
                self._state = self._SIZE
            elif state == self._SIZE:
                j = self._line_end(data, i, 256, "chunk size line")
                if j < 0:
                    break
                line = data[i:j]
                semi = line.find(b";")  # chunk extensions are ignored
                if semi >= 0:
                    line = line[:semi]
                line = line.strip(b" \t")
                if not line or len(line) > 16 or line.strip(_HEX):
                    raise ChunkError(f"bad chunk size line {data[i:j][:40]!r}")
                size = int(line, 16)
                i = j + 2
                if size:
                    self._remaining = size
                    self._state = self._DATA
                else:
                    self._state = self._TRAILER
            elif state == self._TRAILER:  # at the start of a trailer line; an empty line ends the message
                j = self._line_end(data, i, 8192, "trailer line")
                if j < 0:
                    break
                empty = j == i
                i = j + 2
                if empty:
                    self._state = self._DONE
                    self.ended = True
                    break
            else:  # done: anything more is not part of this message
                break
        return out


class StallWatch:
    """Calls on_stall() once no touch() happened for stall_s seconds (one timer per stall period)."""

    __slots__ = ("last", "_stall_s", "_on_stall", "_loop", "_handle")

    def __init__(self, loop: asyncio.AbstractEventLoop, stall_s: float, on_stall: Callable[[], None]):
        self.last = time.perf_counter()
        self._stall_s = stall_s
        self._on_stall = on_stall
        self._loop = loop
        self._handle = loop.call_later(stall_s, self._check)

    def _check(self) -> None:
        idle = time.perf_counter() - self.last
        if idle >= self._stall_s:
            self._handle = None
            self._on_stall()
        else:
            self._handle = self._loop.call_later(self._stall_s - idle, self._check)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class BodyTap(asyncio.Protocol):
    """Stands in for aiohttp's protocol on one connection while a chunked SSE body streams in.

    Each read is stamped (perf_counter - epoch) on arrival, de-chunked and split into SSE events
    at once, and on_events(t, events) is called with them. `done` resolves to True at the terminal chunk,
    to False when the very first read is not at a chunk boundary (its bytes, and those of any read
    arriving before the driver restores aiohttp's protocol, are kept in `unclaimed` for aiohttp), or fails with ChunkError / TruncatedError / the connection's error /
    the SSE parser's SseLineTooLong.
    """

    def __init__(
        self,
        orig: asyncio.Protocol,
        parser: SseParser,
        epoch: float,
        done: asyncio.Future,
        on_events: Callable[[float, list], None],
    ):
        self.orig = orig
        self.parser = parser
        self.epoch = epoch
        self.done = done
        self.on_events = on_events
        self.decoder = ChunkDecoder()
        self.watch: StallWatch | None = None
        self.unclaimed: bytes | None = None
        self._first = True

    def data_received(self, data: bytes) -> None:
        self.data_received_at(time.perf_counter(), data)

    def data_received_at(self, t: float, data: bytes) -> None:
        """A read whose bytes arrived at perf_counter time t (now, or earlier when the kernel said so)."""
        watch = self.watch
        if watch is not None:
            watch.last = t
        done = self.done
        if done.done():
            if self.unclaimed is not None:  # handed back, but the driver has not restored aiohttp's protocol yet
                self.unclaimed += data  # these bytes follow the unclaimed ones: dropping them desyncs aiohttp's parser
            return
        first, self._first = self._first, False
        parser = self.parser
        decoder = self.decoder
        if decoder.at_chunk_start() and parser.idle():
            # Fused fast path (nearly every read from an LLM server): whole chunks, each holding exactly
            # one `data: ...` event ending in LF LF. The first chunk that is anything else, and the rest
            # of the read after it, go through the decoder and the parser below.
            if first:
                parser.mark_started()
            find = data.find
            n = len(data)
            limit = parser.max_line_bytes
            last_id = parser.last_event_id
            evs = []
            i = 0
            while i < n:
                j = find(b"\r\n", i)
                if j < 0:
                    break
                digits = data[i:j]
                if not digits or len(digits) > 16 or digits.strip(_HEX):
                    break
                end = j + 2 + int(digits, 16)
                if (
                    end == j + 2
                    or end + 2 > n
                    or end - j > limit
                    or data[end : end + 2] != b"\r\n"
                    or data[j + 2 : j + 8] != b"data: "
                    or data[end - 2 : end] != b"\n\n"
                    or find(b"\n", j + 8, end - 2) >= 0
                    or find(b"\r", j + 2, end) >= 0
                ):
                    break
                evs.append(_new_event(SseEvent, ("message", data[j + 8 : end - 2], last_id)))
                i = end + 2
            if i == n:
                if evs:
                    try:
                        self.on_events(t - self.epoch, evs)
                    except Exception as exc:
                        done.set_exception(exc)
                return
            if i:
                first = False  # the read did start at a chunk boundary
                data = data[i:]
        else:
            evs = []
        try:
            pieces = decoder.feed(data)
            more = parser.feed(pieces[0] if len(pieces) == 1 else b"".join(pieces))
            if more:
                evs.extend(more)
            if evs:  # one call per read: the read's events share its arrival time
                self.on_events(t - self.epoch, evs)
        except ChunkError as exc:
            if first:  # not at a chunk boundary: these bytes belong to aiohttp's parser
                self.unclaimed = data
                done.set_result(False)
            else:
                done.set_exception(exc)
            return
        except Exception as exc:  # SseLineTooLong
            done.set_exception(exc)
            return
        if self.decoder.ended:
            done.set_result(True)

    def eof_received(self):
        return self.orig.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(
                exc if exc is not None else TruncatedError("the connection closed before the end of the body")
            )
        elif self.unclaimed:  # handed back but not yet fed: aiohttp's parser must see these bytes before the close
            data, self.unclaimed = self.unclaimed, b""
            self.orig.data_received(data)
        self.orig.connection_lost(exc)

    def pause_writing(self) -> None:
        self.orig.pause_writing()

    def resume_writing(self) -> None:
        self.orig.resume_writing()


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if os.uname().sysname == "Linux" else None)
_SCM_TIMESTAMPNS = _SO_TIMESTAMPNS  # Linux: the control message type equals the option
_TIMESPEC = struct.Struct("@qq")  # struct timespec on 64-bit Linux: tv_sec, tv_nsec
_ANC_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_READ_BYTES = 262144


class KernelStampedReader:
    """Reads a tapped connection's socket itself (recvmsg) so each read carries the kernel's receive
    time (SO_TIMESTAMPNS) instead of the moment the event loop got round to it.

    Why: on one core, a client that is busy (finishing a wave of requests, sending the next ones)
    reaches a readable socket milliseconds after its bytes arrived; stamping on arrival in the
    kernel keeps that lag out of TTFT and ITL. The kernel's stamp is CLOCK_REALTIME, so it is turned
    into a delay (time.time_ns() now minus the stamp) and subtracted from perf_counter() now: no
    clock offset is assumed, and a delay below zero (a clock step) counts as zero.
    While it reads, aiohttp's transport is paused; stop() hands the socket back.
    Linux only: start() returns None wherever the option or the loop's add_reader is missing.
    """

    __slots__ = ("_loop", "_transport", "_sock", "_tap", "_fd", "reads", "loop_wait_ns", "loop_wait_max_ns")

    def __init__(self, loop, transport, sock: socket.socket, tap: BodyTap):
        self._loop = loop
        self._transport = transport
        self._sock = sock
        self._tap = tap
        self._fd = sock.fileno()
        self.reads = 0  # reads that carried the kernel's stamp
        self.loop_wait_ns = 0  # summed over them: how long each waited for the event loop (processing - arrival)
        self.loop_wait_max_ns = 0

    @classmethod
    def start(
        cls, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport, tap: BodyTap
    ) -> "KernelStampedReader | None":
        if _SO_TIMESTAMPNS is None or not _ANC_BYTES:
            return None
        raw = transport.get_extra_info("socket")
        if raw is None:
            return None
        try:
            sock = socket.socket(fileno=os.dup(raw.fileno()))
        except (OSError, ValueError):
            return None
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            transport.pause_reading()
            reader = cls(loop, transport, sock, tap)
            loop.add_reader(reader._fd, reader._readable)
        except (OSError, RuntimeError, NotImplementedError):
            sock.close()
            try:
                transport.resume_reading()
            except (RuntimeError, AttributeError):
                pass
            return None
        return reader

    def _readable(self) -> None:
        # Read until the socket would block: uvloop (libuv) reports data and a hang-up or reset that
        # arrived together as one readable event and then stops polling the descriptor, so an error
        # queued behind the data must be read now or never.
        sock = self._sock
        tap = self._tap
        while sock is not None:
            try:
                data, anc, _flags, _addr = sock.recvmsg(_READ_BYTES, _ANC_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # the error is consumed here, so the request fails with it
                done = tap.done
                if not done.done():
                    done.set_exception(exc)
                self.stop()
                return
            t = time.perf_counter()
            if anc:
                _level, kind, raw = anc[0]
                if kind == _SCM_TIMESTAMPNS and len(raw) >= 16:
                    sec, nsec = _TIMESPEC.unpack_from(raw)
                    delay = time.time_ns() - sec * 1_000_000_000 - nsec
                    self.reads += 1
                    if delay > 0:
                        self.loop_wait_ns += delay
                        if delay > self.loop_wait_max_ns:
                            self.loop_wait_max_ns = delay
                        t -= delay * 1e-9
            if not data:  # EOF stays readable: the resumed transport reads it and reports the close as usual
                self.stop()
                return
            tap.data_received_at(t, data)
            if tap.done.done():
                return
            sock = self._sock

    def stop(self) -> None:
        """Stop reading and give the socket back to the transport (idempotent)."""
        sock = self._sock
        if sock is None:
            return
        self._sock = None
        try:
            self._loop.remove_reader(self._fd)
        finally:
            sock.close()  # closes the duplicate descriptor only
            if not self._transport.is_closing():
                self._transport.resume_reading()


def terminal_chunk() -> bytes:
    """What aiohttp's parser is handed back so it completes the message it started."""
    return _TERMINAL
