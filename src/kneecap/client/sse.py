"""Incremental Server-Sent Events parser, to the WHATWG HTML "event stream" interpretation rules.

Owns: splitting a byte stream that arrives in arbitrary pieces into events (lines end in
LF, CRLF or CR, a CRLF may be split across reads; `data:` lines joined with LF; `:` comments;
`event:`, `id:`, `retry:`; a blank line dispatches; a leading UTF-8 BOM is dropped; an
unterminated event at end of stream is discarded). Pure and I/O-free; it does not decode
JSON (kneecap.client.openai does). Event data stays `bytes` (orjson reads bytes directly).
Source: https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation
"""

from __future__ import annotations

from typing import NamedTuple

from kneecap.errors import KneecapError

DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024  # one SSE line / one event's data; real chunks are < 1 KiB
_BOM = b"\xef\xbb\xbf"
_MESSAGE = "message"


class SseLineTooLong(KneecapError):
    """A line (or one event's accumulated data) exceeded the parser's byte limit."""


class SseEvent(NamedTuple):
    """One dispatched event: `event` type ("message" unless named), `data` bytes, last event `id`."""

    event: str
    data: bytes
    id: str | None = None

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


_new_event = tuple.__new__  # builds an SseEvent without NamedTuple's Python-level __new__


class SseParser:
    """Feed bytes with `feed(chunk)`; it returns the events completed by that chunk, in order.

    `max_line_bytes` bounds memory: a single line, or one event's data, longer than it raises
    SseLineTooLong instead of growing without limit. `retry_ms` holds the last valid `retry:`.
    """

    __slots__ = (
        "max_line_bytes",
        "retry_ms",
        "last_event_id",
        "_buf",
        "_skip_lf",
        "_at_start",
        "_data",
        "_data_bytes",
        "_event",
    )

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES):
        if max_line_bytes < 1:
            raise KneecapError(f"SSE line limit must be >= 1 byte, got {max_line_bytes}", "pass a positive limit")
        self.max_line_bytes = max_line_bytes
        self.retry_ms: int | None = None
        self.last_event_id: str | None = None
        self._buf = b""  # the unterminated tail of the last chunk
        self._skip_lf = False  # the last chunk ended in CR: a LF starting the next one belongs to it
        self._at_start = True  # a BOM may still have to be stripped
        self._data: list[bytes] = []
        self._data_bytes = 0
        self._event: str | None = None

    def idle(self) -> bool:
        """True between events: no partial line, no partial event, no CR awaiting its LF."""
        return not (self._buf or self._data or self._skip_lf or self._event is not None)

    def mark_started(self) -> None:
        """The stream's first bytes were consumed elsewhere (without a BOM): no BOM check from now on."""
        self._at_start = False

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished line or event are held (a stream ending now was cut)."""
        return bool(self._buf or self._data or self._event is not None)

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if not chunk:
            return []
        # Fast path (the shape of nearly every read from an LLM server): no state carried over, whole
        # events only, each one `data: ...` line, LF endings. Anything else takes the general path.
        if (
            not self._buf
            and not self._data
            and self._event is None
            and not self._skip_lf
            and not self._at_start
            and chunk[-2:] == b"\n\n"
            and len(chunk) <= self.max_line_bytes
            and b"\r" not in chunk
        ):
            blocks = chunk.split(b"\n\n")
            blocks.pop()
            out = []
            last_id = self.last_event_id
            for block in blocks:
                if block[:6] != b"data: " or b"\n" in block:
                    break
                out.append(_new_event(SseEvent, (_MESSAGE, block[6:], last_id)))
            else:
                return out
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
                if not chunk:
                    return []
        if self._buf:
            chunk = self._buf + chunk
            self._buf = b""
        if self._at_start:
            if len(chunk) < 3 and _BOM.startswith(chunk):
                self._buf = chunk  # could still be a BOM: wait for more bytes
                return []
            self._at_start = False
            if chunk.startswith(_BOM):
                chunk = chunk[3:]
        if b"\r" in chunk:
            if chunk[-1] == 0x0D:
                self._skip_lf = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = chunk.split(b"\n")
        tail = lines.pop()
        limit = self.max_line_bytes
        if len(tail) > limit:
            raise SseLineTooLong(
                f"SSE line longer than {limit} bytes",
                "the server sent a runaway line; raise the limit only if this is expected",
            )
        self._buf = tail
        if len(chunk) > limit:
            for line in lines:
                if len(line) > limit:
                    raise SseLineTooLong(
                        f"SSE line longer than {limit} bytes",
                        "the server sent a runaway line; raise the limit only if this is expected",
                    )
        out: list[SseEvent] = []
        data = self._data
        for line in lines:
            if not line:  # blank line: dispatch
                if data:
                    payload = data[0] if len(data) == 1 else b"\n".join(data)
                    out.append(_new_event(SseEvent, (self._event or _MESSAGE, payload, self.last_event_id)))
                    data = self._data = []
                    self._data_bytes = 0
                self._event = None
                continue
            if line.startswith(b"data:"):
                value = line[6:] if line[5:6] == b" " else line[5:]
                data.append(value)
                self._data_bytes += len(value) + 1
                if self._data_bytes > limit:
                    raise SseLineTooLong(
                        f"SSE event data longer than {limit} bytes",
                        "the server sent a runaway event; raise the limit only if this is expected",
                    )
                continue
            if line[0] == 0x3A:  # ":" comment (keep-alive pings)
                continue
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"event":
                self._event = value.decode("utf-8", "replace")
            elif name == b"data":  # "data" with no colon: an empty data line
                data.append(value)
                self._data_bytes += 1
            elif name == b"id":
                if b"\x00" not in value:
                    self.last_event_id = value.decode("utf-8", "replace")
            elif name == b"retry":
                if value and value.isdigit():
                    self.retry_ms = int(value)
            # any other field name is ignored, as the spec says
        return out
