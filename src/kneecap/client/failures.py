"""Failure kinds of one request and how an exception raised while sending or reading it maps to one.

Owns the error_kind vocabulary of RequestRecord for the HTTP client (besides "http_<status>") and
the mapping from aiohttp / OS / body-reading exceptions to it. Pure: no I/O.
"""

from __future__ import annotations

import asyncio
import errno
from typing import Iterable

import aiohttp

from kneecap.client import openai as oa
from kneecap.client.body_tap import ChunkError, StallError, TruncatedError
from kneecap.client.sse import SseLineTooLong
from kneecap.metrics import stop

# error_kind values (besides "http_<status>")
CONNECTION_REFUSED = "connection_refused"  # could not connect at all
CONNECTION_RESET = "connection_reset"  # reset / closed mid-request, incl. a dropped kept-alive connection
TIMEOUT_KIND = "timeout"  # the per-request total timeout (or connect timeout, or no answer within stall_timeout_s)
STALL = "stall"  # the response started, then no byte arrived for stall_timeout_s
MALFORMED_SSE = oa.MALFORMED_SSE  # bad JSON, a runaway line, wrong content type, unparseable body
SERVER_ERROR_EVENT = oa.SERVER_ERROR_EVENT  # an error object / `event: error` inside a 200 stream
INCOMPLETE_STREAM = "incomplete_stream"  # the body ended before data: [DONE] (truncated or missing)
PROTOCOL_ERROR = "protocol_error"  # not HTTP the client could read
CANCELLED_KIND = "cancelled"  # the level or run was stopped while the request was in flight
CLIENT_ERROR = "client_error"  # anything else (a bug in the client, reported, never raised)
# the server refused the API key: the first of these in a level cuts it (kneecap.client.driver.AuthCut)
AUTH_REFUSED_KINDS = stop.AUTH_REFUSED_KINDS


def _chain(exc: BaseException) -> Iterable[BaseException]:
    """The exception, its causes/contexts, and exceptions carried in args (aiohttp nests them there)."""
    todo, seen = [exc], 0
    while todo and seen < 16:
        e = todo.pop()
        seen += 1
        yield e
        todo.extend(x for x in (e.__cause__, e.__context__, *getattr(e, "args", ())) if isinstance(x, BaseException))


def classify_exception(exc: BaseException, response_started: bool) -> tuple[str, str]:
    """(error_kind, message) for an exception raised while sending or reading one request."""
    name = type(exc).__name__
    text = str(exc)[:300]
    if isinstance(exc, SseLineTooLong):
        return MALFORMED_SSE, exc.message
    if isinstance(exc, StallError):
        return STALL, "no data from the server within the stall timeout"
    if isinstance(exc, TruncatedError):
        return INCOMPLETE_STREAM, str(exc)
    if isinstance(exc, ChunkError):
        return PROTOCOL_ERROR, f"bad chunked body: {text}"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return TIMEOUT_KIND, f"connect timeout: {text}"
    if isinstance(exc, aiohttp.ServerTimeoutError):  # sock_read: no byte for stall_timeout_s
        if response_started:
            return STALL, "no data from the server within the stall timeout"
        return TIMEOUT_KIND, "the server did not answer within the stall timeout"
    if isinstance(exc, asyncio.TimeoutError):
        return TIMEOUT_KIND, "the request exceeded its total timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_err = getattr(exc, "os_error", None)
        if isinstance(os_err, ConnectionRefusedError) or getattr(os_err, "errno", None) == errno.ECONNREFUSED:
            return CONNECTION_REFUSED, f"connection refused: {text}"
        return CONNECTION_REFUSED, f"cannot connect: {text}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        if response_started:
            return CONNECTION_RESET, "the server closed the connection mid-response"
        return CONNECTION_RESET, (
            "the server closed the connection before answering (a kept-alive connection "
            "dropped, as llama.cpp does); --no-keepalive avoids reuse"
        )
    if isinstance(exc, aiohttp.ClientPayloadError):
        for e in _chain(exc):
            if isinstance(e, (ConnectionResetError, BrokenPipeError)):
                return CONNECTION_RESET, f"connection reset mid-stream: {text}"
        if "ConnectionResetError" in str(exc):  # older aiohttp keeps only the text
            return CONNECTION_RESET, f"connection reset mid-stream: {text}"
        return INCOMPLETE_STREAM, f"the response body ended early: {text}"
    if isinstance(exc, (aiohttp.ClientOSError, ConnectionError)) or (
        isinstance(exc, OSError) and not isinstance(exc, aiohttp.ClientError)
    ):
        return CONNECTION_RESET, f"{name}: {text}"
    if isinstance(exc, aiohttp.ClientError):  # ClientResponseError among them
        return PROTOCOL_ERROR, f"{name}: {text}"
    return CLIENT_ERROR, f"{name}: {text}"
