"""Does the server keep a connection open after a streamed response? Asked once, before a sweep.

Some servers close the connection after every streamed response while still advertising
keep-alive (llama.cpp's server does: measured against the `xllamacpp` 2026.10 build, each of six
streamed responses on one connection was followed by the server's FIN within 50 ms, with
`Keep-Alive: timeout=5, max=100` in the headers and no `Connection: close`). A client that reuses
such a connection at once races that FIN and loses a share of its requests as connection resets
before the first byte (kneecap measured 19-29 of 40-60 at C=4).

The probe sends two small streamed requests (max_tokens 2, unique prompts) on a pool of exactly
one connection, `PAUSE_S` apart, and asks aiohttp's connection pool whether the second request
reused the first one's connection (aiohttp drops a pooled connection that the server has closed,
and one whose response said `Connection: close`). `kneecap bench` runs it when neither
`--keepalive` nor `--no-keepalive` is given and opens a new connection per request when the server
does not keep them; the decision and the probe's finding go into summary.json (`connections`).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

import aiohttp

from kneecap.client import openai as oa
from kneecap.client.driver import request_headers

PAUSE_S = 0.25  # between the two probe requests: longer than the 50 ms llama.cpp takes to close
PROBE_MAX_TOKENS = 2
PROBE_PROMPT_PREFIX = "kneecap keep-alive probe"  # + a random nonce and the request's number: never cached
PROBE_TIMEOUT_S = 60.0  # each probe request, total (a cold server may be slow to answer its first request)


@dataclass(frozen=True)
class KeepAliveProbe:
    """What the probe found. kept_alive None = it could not tell (a probe request failed)."""

    kept_alive: bool | None
    detail: str
    requests_sent: int  # probe requests the server may have seen (servers that count requests see these too)

    def to_dict(self) -> dict:
        return {"kept_alive": self.kept_alive, "detail": self.detail, "requests_sent": self.requests_sent}

    def decision(self) -> dict:
        """summary.json's `connections` after this probe: reuse connections unless the server was
        seen closing them (a probe that could not tell keeps the default, reuse)."""
        return {"keepalive": self.kept_alive is not False, "decided_by": "probe", "probe": self.to_dict()}


async def probe_keepalive(cfg, *, pause_s: float = PAUSE_S, timeout_s: float = PROBE_TIMEOUT_S) -> KeepAliveProbe:
    """Two streamed requests on one pooled connection: was the connection still there for the second?

    `cfg` is a kneecap.client.driver.ClientConfig with its model set. Each request is read to its
    end; `timeout_s` bounds each one (seconds, total)."""
    created: list[bool] = []  # per request: True = a new connection, False = the pooled one

    async def on_create(session, ctx, params) -> None:
        created.append(True)

    async def on_reuse(session, ctx, params) -> None:
        created.append(False)

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(on_create)
    trace.on_connection_reuseconn.append(on_reuse)
    headers = request_headers(cfg)
    connector = aiohttp.TCPConnector(limit=1, keepalive_timeout=60.0)
    nonce = os.urandom(6).hex()
    sent = 0

    def found(kept_alive: bool | None, detail: str) -> KeepAliveProbe:
        return KeepAliveProbe(kept_alive, detail, requests_sent=sent)

    async with aiohttp.ClientSession(connector=connector, headers=headers, trace_configs=[trace]) as session:
        for i in range(2):
            body = oa.request_body(
                cfg.endpoint,
                cfg.model,
                f"{PROBE_PROMPT_PREFIX} {nonce} {i}",
                PROBE_MAX_TOKENS,
                stream=True,
                ignore_eos=cfg.ignore_eos,
                extra_body=cfg.extra_body,
            )
            sent = i + 1
            try:
                async with session.post(
                    cfg.url, data=oa.encode_body(body), timeout=aiohttp.ClientTimeout(total=timeout_s)
                ) as resp:
                    await resp.read()
                    if resp.status != 200:
                        return found(None, f"probe request {sent} answered HTTP {resp.status}")
            except (aiohttp.ServerDisconnectedError, ConnectionResetError) as exc:
                if created == [True, False]:  # the second request's reused connection was closed under it
                    return found(
                        False, f"the server closed a reused connection without answering ({type(exc).__name__})"
                    )
                return found(None, f"probe request {sent} failed: {type(exc).__name__}")
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                return found(None, f"probe request {sent} failed: {type(exc).__name__}")
            if i == 0:
                await asyncio.sleep(pause_s)
    if len(created) != 2:
        return found(None, "the connection pool did not report both probe requests")
    if created[1]:
        return found(
            False,
            "the server closed the connection after a streamed response "
            f"(a second request {pause_s * 1000:.0f} ms later needed a new one)",
        )
    return found(
        True, f"the connection stayed open after a streamed response and was reused {pause_s * 1000:.0f} ms later"
    )
