"""The async HTTP driver: sends RequestSpecs to an OpenAI-compatible server and emits RequestRecords.

Owns the sockets and clocks of a level: one pooled aiohttp ClientSession per process (a `Client`),
connections opened before the level's clock starts, `sent_at` stamped right before the request is
handed to aiohttp, every socket read stamped on arrival (time.perf_counter, CLOCK_MONOTONIC on
Linux), each read de-chunked, split into SSE events and decoded into (time, tokens) as it arrives
(memory: two numbers per read; body_tap.py reads chunked bodies at the transport level),
levels on the real clock (each runs a kneecap.workload.load_shape.LoadSchedule, the one the simulator runs in
virtual time: closed loop, open loop with no coordinated omission, conversations, trace sessions), and the
client's self-measurement (event-loop lag, schedule lag, CPU) that marks a level `suspect`.
Failures never hang (total and stall timeouts) and are never retried: each becomes a record with
an error_kind (kneecap.client.failures). The first request of a level the server refuses for its API key
(HTTP 401/403) ends the level at once (AuthCut). The API key is sent in the Authorization header and nowhere else.
Does not write files (the caller's on_record does), summarise (kneecap.metrics) or draw progress.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Iterable, Mapping, Sequence

import aiohttp

from kneecap.client import openai as oa
from kneecap.client.body_tap import BodyTap, KernelStampedReader, StallError, StallWatch, terminal_chunk
from kneecap.client.failures import (
    AUTH_REFUSED_KINDS,
    CANCELLED_KIND,
    CONNECTION_RESET,  # noqa: F401
    INCOMPLETE_STREAM,
    MALFORMED_SSE,
    STALL,
    TIMEOUT_KIND,
    classify_exception,
)
from kneecap.client.fdlimit import ensure_fd_limit
from kneecap.client.selfcheck import LevelRun, ReadStamps, SelfMonitor, judge_suspect  # noqa: F401
from kneecap.client.prompts import Prompt, PromptSource, RandomTextPrompts, RandomTokenPrompts
from kneecap.client.read_path import AIOHTTP, PROBE_TOKENS, TAP, TAP_KERNEL, LoopbackSse, missing_tap_hooks
from kneecap.client.sse import DEFAULT_MAX_LINE_BYTES, SseParser
from kneecap.errors import KneecapError
from kneecap.records import CANCELLED, ERROR, OK, TIMEOUT, RequestRecord
from kneecap.workload import RequestSpec
from kneecap.workload.load_shape import LoadSchedule, open_loop_offsets
from kneecap.workload.ramps import user_windows
from kneecap.workload.endpoints import COMPLETIONS, endpoint_path

CONNECT_TIMEOUT_S = 10.0  # opening a connection (aiohttp sock_connect)


@dataclass(frozen=True)
class ClientConfig:
    """How to talk to the server. The api_key is kept out of repr (and therefore out of logs)."""

    base_url: str
    model: str
    endpoint: str = COMPLETIONS  # "completions" | "chat"
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 600.0  # per request, total (connect + wait + stream)
    stall_timeout_s: float = 120.0  # longest silence between two reads (and before the response starts)
    keepalive: bool = True  # False (--no-keepalive): a new connection per request (aiohttp force_close)
    ignore_eos: bool = True
    continuous_usage_stats: bool = False  # ask for usage in every chunk (vLLM's stream_options extension)
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    keep_prompts: bool = False  # put prompt text in records (else only its sha256)
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES

    def __post_init__(self) -> None:
        url = (self.base_url or "").strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise KneecapError(
                f"base URL {self.base_url!r} is not an http(s) URL", "pass e.g. --base-url http://127.0.0.1:8000"
            )
        if url.endswith("/v1"):
            url = url[:-3]
        object.__setattr__(self, "base_url", url)
        endpoint_path(self.endpoint)
        for name in ("timeout_s", "stall_timeout_s"):
            if not getattr(self, name) > 0:
                raise KneecapError(f"{name} must be positive, got {getattr(self, name)!r}", f"pass a positive {name}")
        if self.max_line_bytes < 1024:
            raise KneecapError(f"max_line_bytes must be >= 1024, got {self.max_line_bytes}", "raise the SSE line limit")

    @property
    def url(self) -> str:
        return self.base_url + endpoint_path(self.endpoint)


@dataclass(frozen=True)
class PreparedRequest:
    """A spec with its body already encoded (done before the level's clock starts)."""

    spec: RequestSpec
    body: bytes
    prompt_hash: str
    prompt_text: str | None  # only with keep_prompts
    expected_input_tokens: int | None


def default_prompt_source(cfg: ClientConfig) -> PromptSource:
    """Token ids on /v1/completions (exact ISL); random words on chat (ISL approximate, usage tells)."""
    return RandomTokenPrompts() if cfg.endpoint == COMPLETIONS else RandomTextPrompts()


def prepare_requests(
    cfg: ClientConfig, specs: Iterable[RequestSpec], prompts: PromptSource | None = None
) -> list[PreparedRequest]:
    """Build and encode every request body (before a level's clock starts)."""
    source = prompts if prompts is not None else default_prompt_source(cfg)
    return [_prepared(cfg, spec, source.prompt_for(spec)) for spec in specs]


def _prepared(cfg: ClientConfig, spec: RequestSpec, prompt: Prompt) -> PreparedRequest:
    """One request's encoded body (its prompt text kept only with keep_prompts)."""
    body = oa.request_body(
        cfg.endpoint,
        cfg.model,
        prompt.content,
        spec.output_tokens,
        ignore_eos=cfg.ignore_eos,
        continuous_usage_stats=cfg.continuous_usage_stats,
        extra_body=cfg.extra_body,
    )
    text = None
    if cfg.keep_prompts:
        text = prompt.content if isinstance(prompt.content, str) else " ".join(map(str, prompt.content))
    return PreparedRequest(spec, oa.encode_body(body), prompt.sha256, text, prompt.num_tokens)


def request_headers(cfg: ClientConfig, stream: bool = True) -> dict:
    """The headers every request to the server carries (the API key only here, never in a record)."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream" if stream else "application/json"}
    if cfg.api_key:
        headers["Authorization"] = f"Bearer {cfg.api_key}"
    return headers


async def _stamp_body_sent(session, ctx, params) -> None:
    stamp = ctx.trace_request_ctx
    if type(stamp) is list and stamp[0] is None:
        stamp[0] = time.perf_counter()  # the first body write carries the buffered headers with it


async def _mark_reused(session, ctx, params) -> None:
    stamp = ctx.trace_request_ctx
    if type(stamp) is list:
        stamp[1] = True


try:  # Python 3.11+; aiohttp brings async-timeout on 3.10
    from asyncio import timeout as _timeout
except ImportError:  # pragma: no cover - Python 3.10
    from async_timeout import timeout as _timeout


def _expired(cm) -> bool:
    flag = cm.expired  # a method on asyncio.Timeout, a property on async_timeout.Timeout
    return flag() if callable(flag) else bool(flag)


_STATUS_OF_KIND = {TIMEOUT_KIND: TIMEOUT, STALL: TIMEOUT, CANCELLED_KIND: CANCELLED}


def _cancelling(task) -> bool:
    """Has someone asked to cancel this task (Python 3.11+; False where that cannot be told)?"""
    count = getattr(task, "cancelling", None)
    return bool(count()) if count is not None else False


class AuthCut:
    """Ends a level at the first record the server refused for the API key (HTTP 401 or 403).

    The key was accepted when the run began, so every later request would be refused too: sending
    them would only be a storm of refusals. `see(record)` is called with each record as it finishes;
    at the first refusal it cancels the level's other tasks (its streams, an open loop's scheduler and
    its requests in flight: each of those is recorded "cancelled" by Client.send), and the level's
    loops send nothing after it (they check `cut` before each request). The records that finished
    stay as they are. `kind` is the refusal that cut the level ("http_401" / "http_403"), else None.

    `shared`: set in a `--workers` process (kneecap.sweep.workers), a multiprocessing.Value("i") that all
    the level's workers share: a refusal writes its status there, and each worker's level watches it
    (every SHARED_CUT_POLL_S), so the first refusal in any worker cuts the level in all of them.
    """

    shared = None  # per process: None (one process), or the workers' shared status (0 = not cut)
    SHARED_CUT_POLL_S = 0.02

    def __init__(self) -> None:
        self.kind: str | None = None
        self.tasks: set = set()
        self._watcher = None

    @property
    def cut(self) -> bool:
        if self.kind is None and self.shared is not None and self.shared.value:
            self.kind = f"http_{self.shared.value}"  # another worker's refusal cut the level
        return self.kind is not None

    def see(self, rec: RequestRecord) -> None:
        if self.kind is not None or rec.error_kind not in AUTH_REFUSED_KINDS:
            return
        self._cut(rec.error_kind)
        if self.shared is not None:
            self.shared.value = int(rec.error_kind[5:])

    def _cut(self, kind: str) -> None:
        self.kind = kind
        me = asyncio.current_task()
        for task in list(self.tasks):
            if task is not me:
                task.cancel()

    async def _watch_shared(self) -> None:
        """A worker's level: cut it when another worker's refusal is written to `shared`; ends with the level."""
        while self.kind is None:
            await asyncio.sleep(self.SHARED_CUT_POLL_S)
            if self.kind is None and self.shared.value:
                self._cut(f"http_{self.shared.value}")
            elif self.tasks and all(task.done() for task in self.tasks):
                return

    def emitter(
        self, on_record: Callable[[RequestRecord], None], records: list[RequestRecord] | None
    ) -> Callable[[RequestRecord], None]:
        """A level's one sink for each finished record: kept in `records` (None: not kept), handed to
        `on_record`, then seen here (a refusal cuts the level). In a worker, also starts watching `shared`."""

        def emit(rec: RequestRecord) -> None:
            if records is not None:
                records.append(rec)
            on_record(rec)
            self.see(rec)

        if self.shared is not None:
            self._watcher = asyncio.ensure_future(self._watch_shared())  # held: a task nobody holds may be collected
        return emit

    def ended(self, exc: asyncio.CancelledError) -> None:
        """A task of the level was cancelled: fine if this cut did it, else the cancel goes on up."""
        if self.kind is None:
            raise exc


class Client:
    """One pooled aiohttp session for the life of a process; sends levels of requests.

    async with Client(cfg) as client:
        run = await client.run_closed_loop(specs, 64, level=0, epoch=epoch, on_record=writer.write)
    """

    def __init__(
        self,
        cfg: ClientConfig,
        prompts: PromptSource | None = None,
        *,
        tap_bodies: bool = True,
        kernel_stamps: bool = True,
        read_path: str | None = None,
    ):
        self.cfg = cfg
        self.prompts = prompts
        self.tap_bodies = tap_bodies  # False: always read through aiohttp's StreamReader
        self.kernel_stamps = kernel_stamps  # tapped bodies: stamp reads with the kernel's receive time
        # kneecap.client.read_path: TAP_KERNEL, TAP or AIOHTTP, chosen at open() by choose_read_path()
        # (a value given here is taken as is: the self-test's own client)
        self.read_path = read_path
        self.read_path_note: str | None = None  # why the path is not the one asked for
        self.read_stamps = ReadStamps()  # running counts: which clock stamped the body reads
        self.bodies_tapped = 0  # streams read by a BodyTap (counters for tests and diagnostics)
        self.bodies_via_aiohttp = 0
        self._session: aiohttp.ClientSession | None = None
        self._headers = request_headers(cfg)

    def __repr__(self) -> str:
        return f"Client({self.cfg!r})"

    async def __aenter__(self) -> "Client":
        await self.open()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def open(self) -> None:
        if self._session is not None:
            return
        cfg = self.cfg
        connector = aiohttp.TCPConnector(
            limit=0,
            limit_per_host=0,
            force_close=not cfg.keepalive,
            keepalive_timeout=300.0 if cfg.keepalive else None,
            ttl_dns_cache=3600,
        )
        # total and stall timeouts are the driver's own (send / _read_stream); aiohttp keeps the connect one
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=CONNECT_TIMEOUT_S)
        # sent_at: aiohttp 3.12+ serialises the headers in StreamWriter.write_headers but buffers them and
        # hands them to the socket together with the first body write, which on Python < 3.12 runs in a
        # task of its own, one event-loop turn later (ClientRequest.send / write_bytes). That turn can be
        # long when many streams are being read, so sent_at is stamped on on_request_chunk_sent, in the
        # same synchronous step as the transport write (every request sent here has a JSON body).
        # aiohttp < 3.12 writes the headers at once and the body in that later turn: sent_at is then the
        # moment the body, the request's last bytes, goes out (the server has the whole request only then).
        trace = aiohttp.TraceConfig()
        trace.on_request_chunk_sent.append(_stamp_body_sent)
        trace.on_connection_reuseconn.append(_mark_reused)  # to tell a dropped kept-alive connection apart
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=timeout, headers=self._headers, trace_configs=[trace]
        )
        if self.read_path is None:
            self.read_path, self.read_path_note = await self.choose_read_path()

    async def choose_read_path(self) -> tuple[str, str | None]:
        """(path, why it is not the one asked for) for this client's streamed bodies: the body tap when
        this aiohttp has every attribute it touches and two chunked streams from a loopback server read
        through it come out whole, on one reused connection (the hand-back left aiohttp's parser in
        step); kernel receive stamps when they stamped those streams; else aiohttp's own reader."""
        if not self.tap_bodies:
            return AIOHTTP, None
        missing = missing_tap_hooks()
        if missing:
            return AIOHTTP, f"aiohttp {aiohttp.__version__} lacks {', '.join(missing)}"
        want = TAP_KERNEL if self.kernel_stamps else TAP
        try:
            async with LoopbackSse() as srv:
                cfg = ClientConfig(base_url=srv.url, model="read-path-check", timeout_s=5.0, stall_timeout_s=5.0)
                async with Client(cfg, read_path=want) as probe:
                    records = []
                    for i in range(2):
                        spec = RequestSpec(
                            index=i,
                            request_id=f"read-path-check-{i}",
                            class_name="check",
                            input_tokens=1,
                            output_tokens=PROBE_TOKENS,
                        )
                        await probe.send(
                            PreparedRequest(spec, b"{}", "", None, None), level=0, epoch=0.0, on_record=records.append
                        )
        except (OSError, RuntimeError) as exc:
            return AIOHTTP, f"the body tap's self-test could not run: {type(exc).__name__}: {exc}"
        bad = [
            r.error_message or f"{r.chunk_tokens} tokens"
            for r in records
            if not r.ok or r.chunk_tokens != [1] * PROBE_TOKENS
        ]
        if bad or probe.bodies_tapped < 1 or srv.connections != 1:
            why = (
                bad[0]
                if bad
                else (
                    f"{srv.connections} connections for 2 requests"
                    if srv.connections != 1
                    else "no stream reached the tap"
                )
            )
            return AIOHTTP, f"the body tap's self-test on aiohttp {aiohttp.__version__} failed ({why})"
        if want == TAP_KERNEL and probe.read_stamps.kernel_streams < probe.bodies_tapped:
            return TAP, "kernel receive stamps (SO_TIMESTAMPNS) are not available here"
        return want, None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise KneecapError("the client is not open", "use `async with Client(cfg) as client:`")
        return self._session

    def _scrub(self, text: str | None) -> str | None:
        key = self.cfg.api_key
        if text and key and key in text:
            return text.replace(key, "***")
        return text

    async def warm(self, num_connections: int) -> int:
        """Open up to num_connections pooled connections (concurrent GET /v1/models); returns how many answered."""
        if not self.cfg.keepalive or num_connections <= 0:
            return 0
        url = self.cfg.base_url + "/v1/models"
        timeout = aiohttp.ClientTimeout(total=min(30.0, self.cfg.timeout_s))

        async def one() -> bool:
            try:
                async with self.session.get(url, timeout=timeout) as resp:
                    await resp.read()
                    return True
            except (aiohttp.ClientError, asyncio.TimeoutError):
                return False

        done = await asyncio.gather(*(one() for _ in range(num_connections)))
        return sum(done)

    def _ensure_fds(self, connections: int) -> None:
        """Open-file limit for `connections` sockets (required) and, best effort, the duplicate
        descriptor each stream holds while KernelStampedReader reads it: without one, a stream is
        stamped on the loop's clock, and the level's loop_stamped_streams says so."""
        ensure_fd_limit(connections)
        if self.kernel_stamps:
            try:
                ensure_fd_limit(2 * connections)
            except KneecapError:
                pass

    def _start_level(self) -> tuple[SelfMonitor, float]:
        """A level begins: fresh read-stamp counts, the self-monitor running, and the level's start time."""
        self.read_stamps = ReadStamps(read_path=self.read_path, read_path_note=self.read_path_note)
        monitor = SelfMonitor()
        monitor.start()
        return monitor, time.perf_counter()

    def prepare(self, specs: Iterable[RequestSpec]) -> list[PreparedRequest]:
        return prepare_requests(self.cfg, specs, self.prompts)

    async def send(
        self,
        prep: PreparedRequest,
        *,
        level: int,
        epoch: float,
        on_record: Callable[[RequestRecord], Any],
        concurrency: int | None = None,
        rate: float | None = None,
        scheduled_at: float | None = None,
        warmup: bool = False,
        answer: list | None = None,
    ) -> RequestRecord:
        """Send one prepared request, stream its answer, build its record and hand it to on_record.

        answer: a list the streamed answer's text pieces are appended to (multi-turn builds the next turn on it).
        Never raises for a server or network failure (the record says what happened). A cancelled
        request is recorded (status "cancelled") before the CancelledError propagates.
        """
        cfg = self.cfg
        spec = prep.spec
        rec = RequestRecord(
            request_id=spec.request_id,
            level=level,
            concurrency=concurrency,
            rate=rate,
            class_name=spec.class_name,
            warmup=warmup,
            scheduled_at=scheduled_at,
            expected_input_tokens=prep.expected_input_tokens,
            expected_output_tokens=spec.output_tokens,
            prompt_hash=prep.prompt_hash,
            prompt=prep.prompt_text,
            conversation_id=spec.conversation_id,
            turn=spec.turn,
        )
        perf = time.perf_counter
        decoder = oa.StreamDecoder(
            cfg.continuous_usage_stats, answer
        )  # fed read by read: memory stays two numbers a read
        parser = SseParser(cfg.max_line_bytes)
        started = False
        kind: str | None = None
        message: str | None = None
        cancelled: asyncio.CancelledError | None = None
        stamp = [None, False]  # [time right before the request is written, sent on a reused connection]
        # one total deadline; until the response starts, no answer for stall_timeout_s is a timeout
        total_cm = _timeout(cfg.timeout_s)
        head_cm = _timeout(cfg.stall_timeout_s)
        called_at = perf()
        try:
            async with total_cm:
                async with head_cm:
                    resp = await self.session.post(cfg.url, data=prep.body, trace_request_ctx=stamp)
                started = True
                try:
                    status = resp.status
                    if status != 200:
                        kind = f"http_{status}"
                        async with _timeout(cfg.stall_timeout_s):
                            raw = await resp.content.read(2048)
                        message = f"HTTP {status}: {raw[:300].decode('utf-8', 'replace')}"
                    else:
                        ctype = resp.headers.get("Content-Type", "")
                        if not ctype.startswith("text/event-stream"):
                            kind, message = (
                                MALFORMED_SSE,
                                f"expected text/event-stream, got content type {ctype[:80]!r}",
                            )
                        else:
                            await self._read_stream(resp, parser, decoder.feed, epoch)
                finally:
                    resp.release()
        except asyncio.CancelledError as exc:
            cancelled = exc
            kind, message = CANCELLED_KIND, "stopped while in flight"
        except TimeoutError as exc:
            if _expired(total_cm):
                kind, message = TIMEOUT_KIND, f"the request exceeded its total timeout ({cfg.timeout_s:g} s)"
            elif _expired(head_cm):
                kind, message = (
                    TIMEOUT_KIND,
                    f"the server did not answer within the stall timeout ({cfg.stall_timeout_s:g} s)",
                )
            else:
                kind, message = classify_exception(exc, started)
        except Exception as exc:  # every failure becomes a record; nothing escapes a level
            kind, message = classify_exception(exc, started)
        rec.end_at = perf() - epoch
        rec.sent_at = (stamp[0] if stamp[0] is not None else called_at) - epoch
        result = decoder.result
        rec.chunk_times = result.chunk_times
        rec.chunk_tokens = result.chunk_tokens
        rec.first_token_at = result.first_token_at
        rec.first_answer_at = result.first_answer_at
        rec.prompt_tokens = result.prompt_tokens
        rec.output_tokens = result.output_tokens
        if result.reasoning_tokens is not None:
            rec.extra["reasoning_tokens"] = result.reasoning_tokens
        if result.cached_tokens is not None:
            rec.extra["cached_tokens"] = result.cached_tokens
        if result.finish_reason is not None:
            rec.extra["finish_reason"] = result.finish_reason
        if kind is None and result.error_kind:
            kind, message = result.error_kind, result.error_message
        if kind is None and not result.done:  # no data: [DONE]: an incomplete_stream failure
            kind, message = INCOMPLETE_STREAM, "the stream ended without data: [DONE]"
        if kind is not None:
            if kind == CONNECTION_RESET and stamp[1]:
                rec.extra["reused_connection"] = True  # llama.cpp-style keep-alive drop: --no-keepalive avoids it
            rec.status = _STATUS_OF_KIND.get(kind, ERROR)
            rec.error_kind = kind
            rec.error_message = self._scrub(message)
        else:
            rec.status = OK
        on_record(rec)
        if cancelled is not None:
            raise cancelled
        return rec

    async def _read_stream(
        self, resp: aiohttp.ClientResponse, parser: SseParser, on_events: Callable[[float, list], None], epoch: float
    ) -> None:
        """Read an SSE body, calling on_events(t, events) for each socket read (t: its arrival - epoch).

        A chunked, uncompressed, plain-TCP body is read by a BodyTap standing in for aiohttp's
        protocol (see body_tap.py); anything else, or a body whose first read does not start at a
        chunk boundary, through aiohttp's StreamReader. Raises StallError after stall_timeout_s of
        silence, and whatever the connection raised.
        """
        loop = asyncio.get_running_loop()
        perf = time.perf_counter
        stall_s = self.cfg.stall_timeout_s
        content = resp.content
        conn = resp.connection
        proto = conn.protocol if conn is not None else None
        transport = proto.transport if proto is not None else None
        if (
            self.read_path != AIOHTTP
            and transport is not None
            and not content.is_eof()
            and resp.headers.get("Transfer-Encoding", "").lower() == "chunked"
            and "Content-Encoding" not in resp.headers
            and transport.get_extra_info("sslcontext") is None
        ):
            early = content.read_nowait()  # body bytes that came with the headers
            if early:
                events = parser.feed(early)
                if events:
                    on_events(perf() - epoch, events)
            done = loop.create_future()
            tap = BodyTap(proto, parser, epoch, done, on_events)

            def on_stall() -> None:
                if not done.done():
                    done.set_exception(StallError("no data within the stall timeout"))

            tap.watch = StallWatch(loop, stall_s, on_stall)
            transport.set_protocol(tap)
            reader = KernelStampedReader.start(loop, transport, tap) if self.read_path == TAP_KERNEL else None
            claimed = False
            try:
                claimed = await done
            except BaseException:
                if reader is not None:
                    reader.stop()
                resp.close()  # the connection is mid-message: never reuse it
                raise
            finally:
                tap.watch.cancel()
                if reader is not None:
                    reader.stop()
                    self.read_stamps.add_kernel(reader.reads, reader.loop_wait_ns, reader.loop_wait_max_ns)
                if transport.get_protocol() is tap:
                    transport.set_protocol(proto)
            if claimed:
                self.bodies_tapped += 1
                if reader is None:
                    self.read_stamps.loop_streams += 1
                proto.data_received(terminal_chunk())  # aiohttp's parser completes the message it began
                if not content.is_eof():
                    resp.close()
                return
            if tap.unclaimed:  # empty when the tap already fed them to aiohttp at connection_lost
                proto.data_received(tap.unclaimed)  # not at a chunk boundary: aiohttp reads the rest
        self.bodies_via_aiohttp += 1
        self.read_stamps.loop_streams += 1
        self.read_stamps.aiohttp_streams += 1
        watch = StallWatch(loop, stall_s, lambda: content.set_exception(StallError("no data within the stall timeout")))
        readany = content.readany
        feed = parser.feed
        try:
            while True:
                data = await readany()
                if not data:
                    break
                t = perf()
                watch.last = t
                events = feed(data)
                if events:
                    on_events(t - epoch, events)
        finally:
            watch.cancel()

    async def run_closed_loop(
        self,
        specs: Sequence[RequestSpec],
        concurrency: int,
        *,
        level: int,
        epoch: float,
        on_record: Callable[[RequestRecord], Any],
        warmup: bool = False,
        duration_s: float | None = None,
        keep_records: bool = True,
        users: Sequence[tuple[float, int]] | None = None,
    ) -> LevelRun:
        """C slots; each sends the next spec as soon as its previous request finished (a LoadSchedule's closed
        loop with no turnaround: this client's own delay is the turnaround).

        With duration_s, no request starts after that many seconds (those in flight finish).
        users: a concurrency ramp's [(t_s, streams)] change points (kneecap.workload.ramps.concurrency_schedule):
        stream u sends only while the target is at least u (its request in flight then finishes).
        keep_records=False: records go only to on_record (LevelRun.records stays empty), so memory does
        not grow with the level's length when the caller streams them to disk.
        """
        if concurrency < 1:
            raise KneecapError(f"concurrency must be >= 1, got {concurrency}", "pass e.g. --concurrency 1,8,64")
        windows = user_windows(list(users)) if users else None
        if windows:
            concurrency = len(windows)
        self._ensure_fds(concurrency)
        preps = self.prepare(specs)
        workers = min(concurrency, len(preps))
        await self.warm(workers)
        slots = dict(windows=windows[:workers]) if windows else dict(slots=workers)
        return await self._run_prepared(
            preps, duration_s, slots, level=level, concurrency=concurrency, rate=None, epoch=epoch,
            on_record=on_record, warmup=warmup, keep_records=keep_records,
        )  # fmt: skip

    async def run_open_loop(
        self,
        specs: Sequence[RequestSpec],
        rate: float,
        *,
        burstiness: float = 1.0,
        seed: int = 0,
        level: int,
        epoch: float,
        on_record: Callable[[RequestRecord], Any],
        warmup: bool = False,
        duration_s: float | None = None,
        warm_connections: int = 0,
        keep_records: bool = True,
        on_s: float | None = None,
        off_s: float = 0.0,
        offsets: Sequence[float] | None = None,
    ) -> LevelRun:
        """Send at kneecap.workload.arrival_offsets times whatever is still in flight (no coordinated
        omission); scheduled_at is recorded, so latency can also be measured from the intended time.
        warm_connections pre-opens that many connections (e.g. rate x expected E2E). on_s/off_s: on/off
        bursts (see arrival_offsets). offsets: send times given instead (a trace's, a ramp's), one per spec.
        A replayed trace's request goes no earlier than its time and never before every answer it depends on
        is back, plus its think time (those among these requests; one sent by another worker or an earlier
        phase counts as back). keep_records as in run_closed_loop.
        """
        preps = self.prepare(specs)
        if offsets is not None:
            if len(offsets) != len(preps):
                raise KneecapError(f"{len(offsets)} send times for {len(preps)} requests", "give one time per request")
        else:
            offsets = open_loop_offsets(rate, len(preps), burstiness, seed, on_s=on_s, off_s=off_s)
        self._ensure_fds(max(warm_connections, 1))
        await self.warm(min(warm_connections, len(preps)))
        return await self._run_prepared(
            preps, duration_s, dict(offsets=offsets), level=level, concurrency=None, rate=rate, epoch=epoch,
            on_record=on_record, warmup=warmup, keep_records=keep_records,
        )  # fmt: skip

    async def _run_prepared(
        self, preps: list[PreparedRequest], duration_s: float | None, shape: dict, **run
    ) -> LevelRun:
        """Run prepared requests under the one LoadSchedule `shape` gives (slots, windows or offsets), none
        starting after duration_s; `run`: _run_schedule's keywords."""
        horizon_s = duration_s if duration_s is not None else math.inf
        schedule = LoadSchedule([p.spec for p in preps], total=len(preps), horizon_s=horizon_s, **shape)
        by_spec = {id(p.spec): p for p in preps}
        return await self._run_schedule(schedule, lambda spec, send: send(by_spec[id(spec)]), **run)

    async def run_conversations(
        self,
        conversations: Sequence,
        concurrency: int,
        specs: Sequence[RequestSpec],
        *,
        level: int,
        epoch: float,
        on_record: Callable[[RequestRecord], Any],
        think_time_s: float = 0.0,
        answer_tokenizer=None,
        warmup: bool = False,
        keep_records: bool = True,
    ) -> LevelRun:
        """C users, each taking the next conversation and sending its turns in order (a LoadSchedule's closed
        loop: a user sends a conversation's next turn think_time_s after its answer, a new conversation when
        one is over).

        Turn k's prompt is turn k-1's prompt + turn k-1's answer as the server streamed it + turn k's new
        input (drawn by this client's prompt source for the turn's own index), so every earlier token is a
        prefix of it: text prompts append the answer's text; token-id prompts append the ids
        answer_tokenizer.token_ids(text) gives it (the server's /tokenize or the local tokenizer). `specs` are
        the turns as planned (conversation_id, turn, index, request id, output length): the record of turn
        (c, k) carries them, with the grown input length. A failed turn ends its conversation (there is no
        answer to build on).
        """
        from kneecap.workload.multiturn import grow_prompt

        if concurrency < 1:
            raise KneecapError(f"concurrency must be >= 1, got {concurrency}", "pass e.g. --concurrency 1,8,64")
        cfg = self.cfg
        source = self.prompts if self.prompts is not None else default_prompt_source(cfg)
        planned = {(s.conversation_id, s.turn): s for s in specs}
        of = {c.conversation_id: c for c in conversations}
        users = min(concurrency, len(conversations))
        self._ensure_fds(users)
        await self.warm(users)
        loop = asyncio.get_running_loop()
        grown: dict[str, tuple[Any, Any]] = {}  # a conversation's last prompt and answer, until its next turn

        async def turn(spec: RequestSpec, send) -> RequestRecord:
            conv = of[spec.conversation_id]
            prompt, answer_content = grown.pop(conv.conversation_id, (None, ()))
            fresh = source.prompt_for(
                RequestSpec(
                    index=spec.index,
                    request_id=spec.request_id,
                    class_name=spec.class_name,
                    input_tokens=conv.new_input_tokens[spec.turn - 1],
                    output_tokens=spec.output_tokens,
                )
            )
            content = fresh.content if prompt is None else grow_prompt(prompt, answer_content, fresh.content)
            known = fresh.num_tokens if prompt is None else (len(content) if not isinstance(content, str) else None)
            size = len(content) if not isinstance(content, str) else (known or spec.input_tokens)
            turn_spec = replace(spec, input_tokens=size, prefix_group=None, prefix_tokens=0)
            pieces: list[str] = []
            rec = await send(_prepared(cfg, turn_spec, Prompt.of(content, known)), answer=pieces)
            if rec.ok and spec.turn < conv.turns:
                answer_text = "".join(pieces)
                if isinstance(content, str):
                    answer_content = answer_text
                else:
                    if answer_tokenizer is None:
                        raise KneecapError(
                            "multi-turn token-id prompts need the answer's token ids",
                            "pass --tokenizer PATH/tokenizer.json (the served model's own)",
                        )
                    answer_content = await loop.run_in_executor(None, answer_tokenizer.token_ids, answer_text)
                grown[conv.conversation_id] = (content, answer_content)
            return rec

        schedule = LoadSchedule(
            [planned[(c.conversation_id, 1)] for c in conversations],
            slots=users,
            follow={
                planned[(c.conversation_id, k)].request_id: planned[(c.conversation_id, k + 1)]
                for c in conversations
                for k in range(1, c.turns)
            },
            think_time_s=think_time_s,
        )
        return await self._run_schedule(
            schedule,
            turn,
            level=level,
            concurrency=concurrency,
            rate=None,
            epoch=epoch,
            on_record=on_record,
            warmup=warmup,
            keep_records=keep_records,
        )

    async def _run_schedule(
        self,
        schedule: LoadSchedule,
        go: Callable[[RequestSpec, Callable], Awaitable[RequestRecord]],
        *,
        level: int,
        concurrency: int | None,
        rate: float | None,
        epoch: float,
        on_record: Callable[[RequestRecord], Any],
        warmup: bool,
        keep_records: bool,
    ) -> LevelRun:
        """Run a level's LoadSchedule on the real clock: one scheduler that sleeps until the next request is due
        or an answer comes back, and a task per request, `go(spec, send)`, which sends it (send(prep, answer=...))
        and returns its record; its answer then goes to the schedule. Records carry the level's concurrency, or its
        rate: an open loop's also carry the time each request was due (scheduled_at), and none goes before it
        (timers may fire early: uvloop's run on whole milliseconds, so the scheduler sleeps again until then)."""
        open_loop = rate is not None
        records: list[RequestRecord] = []
        sched: list[float] = []  # an open loop's schedule lag: sent_at - scheduled_at
        cut = AuthCut()
        keep = cut.emitter(on_record, records if keep_records else None)

        def emit(rec: RequestRecord) -> None:
            if rec.sent_at is not None and rec.scheduled_at is not None:
                sched.append(rec.sent_at - rec.scheduled_at)
            keep(rec)

        loop = asyncio.get_running_loop()
        perf = time.perf_counter
        wake = asyncio.Event()  # set by an answer, and by the timer of the next request due
        in_flight: set[asyncio.Task] = set()
        failed: list[BaseException] = []
        monitor, t0 = self._start_level()

        async def one(at_s: float, spec: RequestSpec) -> None:
            def send(prep: PreparedRequest, answer: list | None = None) -> Awaitable[RequestRecord]:
                return self.send(
                    prep,
                    level=level,
                    epoch=epoch,
                    on_record=emit,
                    concurrency=concurrency,
                    rate=rate,
                    scheduled_at=t0 + at_s - epoch if open_loop else None,
                    warmup=warmup,
                    answer=answer,
                )

            rec = await go(spec, send)
            schedule.answered(spec.request_id, rec.ok, perf() - t0)
            wake.set()

        def done(task: asyncio.Task) -> None:
            in_flight.discard(task)
            cut.tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                failed.append(task.exception())
                wake.set()

        async def scheduler() -> None:
            while not failed:
                for at_s, spec in schedule.pop_due(perf() - t0):
                    if cut.cut:
                        return
                    task = asyncio.ensure_future(one(at_s, spec))
                    in_flight.add(task)
                    cut.tasks.add(task)
                    task.add_done_callback(done)
                if schedule.done() or cut.cut:
                    return
                wake.clear()
                delay = t0 + schedule.next_due_s() - perf()
                if delay > 0:
                    timer = loop.call_later(delay, wake.set) if delay < math.inf else None
                    try:
                        await wake.wait()
                    finally:
                        if timer is not None:
                            timer.cancel()
            raise failed[0]

        try:
            task = asyncio.ensure_future(scheduler())
            cut.tasks.add(task)
            try:
                await task
            except asyncio.CancelledError as exc:
                if _cancelling(asyncio.current_task()):  # this level itself is being cancelled (Ctrl-C)
                    raise
                cut.ended(exc)  # else the cut stopped the schedule
            while in_flight:
                for result in await asyncio.gather(*list(in_flight), return_exceptions=True):
                    if isinstance(result, asyncio.CancelledError):
                        cut.ended(result)
                    elif isinstance(result, BaseException):
                        raise result
        finally:
            for task in list(in_flight):
                task.cancel()
            if in_flight:
                await asyncio.gather(*list(in_flight), return_exceptions=True)
            await monitor.stop()
        return self._level_run(level, concurrency, rate, records, t0 - epoch, perf() - epoch, monitor, sched, cut)

    def _level_run(
        self,
        level: int,
        concurrency: int | None,
        rate: float | None,
        records: list[RequestRecord],
        started_at: float,
        ended_at: float,
        monitor: SelfMonitor,
        sched: list[float],
        cut: AuthCut,
    ) -> LevelRun:
        run = LevelRun(
            level=level,
            concurrency=concurrency,
            rate=rate,
            records=records,
            started_at=started_at,
            ended_at=ended_at,
            cpu_s=monitor.cpu_s,
            loop_lag_s=monitor.samples,
            schedule_lag_s=sched,
            read_stamps=self.read_stamps,
            cut=cut.kind,
        )
        run.suspect_reasons = judge_suspect(
            run.loop_lag_s, run.cpu_fraction, run.schedule_lag_s, duration_s=run.duration_s
        )
        run.suspect = bool(run.suspect_reasons)
        return run


async def _on_client(cfg: ClientConfig, prompts: PromptSource | None, client: Client | None, run) -> LevelRun:
    """`await run(client)` on `client`, or on a Client opened for this call."""
    if client is not None:
        return await run(client)
    async with Client(cfg, prompts) as own:
        return await run(own)


async def run_closed_loop(
    cfg: ClientConfig,
    specs: Sequence[RequestSpec],
    concurrency: int,
    *,
    client: Client | None = None,
    prompts: PromptSource | None = None,
    **kwargs,
) -> LevelRun:
    """Closed loop at `concurrency` (keywords as Client.run_closed_loop) on `client` (or a Client opened for it)."""
    return await _on_client(cfg, prompts, client, lambda c: c.run_closed_loop(specs, concurrency, **kwargs))


async def run_conversations(
    cfg: ClientConfig,
    conversations: Sequence,
    concurrency: int,
    *,
    specs: Sequence[RequestSpec],
    client: Client | None = None,
    prompts: PromptSource | None = None,
    **kwargs,
) -> LevelRun:
    """Multi-turn conversations of C users (keywords as Client.run_conversations) on `client` (or a Client opened
    for them)."""
    return await _on_client(
        cfg, prompts, client, lambda c: c.run_conversations(conversations, concurrency, specs, **kwargs)
    )


async def run_open_loop(
    cfg: ClientConfig,
    specs: Sequence[RequestSpec],
    rate: float,
    *,
    client: Client | None = None,
    prompts: PromptSource | None = None,
    **kwargs,
) -> LevelRun:
    """Open loop at `rate` requests/s (keywords as Client.run_open_loop) on `client` (or a Client opened for it)."""
    return await _on_client(cfg, prompts, client, lambda c: c.run_open_loop(specs, rate, **kwargs))


def run_sync(coro) -> Any:
    """Run a coroutine on a fresh event loop, uvloop's when installed (the process's one loop)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.run(coro)
    return uvloop.run(coro)
