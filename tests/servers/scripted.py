"""A scripted OpenAI-compatible streaming server for tests, run in its own process on 127.0.0.1.

Its timing is scripted (TTFT, ITL, tokens per chunk, output length = max_tokens) and it can
misbehave on purpose (HTTP 500/503/429, malformed JSON, missing [DONE], truncated stream, huge
line, wrong content type, stall, accept-and-never-answer, slow-loris, TCP reset mid-stream,
an error object in the stream, closing keep-alive connections). It appends one JSON line per
request to a log: what it received (body, whether an Authorization header came and its sha256)
and time.perf_counter() stamps of each chunk it wrote (CLOCK_MONOTONIC, the same clock the
client's perf_counter reads on Linux, so tests compare the two directly).

Use from a test (tests/ is on sys.path through the rootdir conftest):

    from servers.scripted import start_scripted_server
    url, server = start_scripted_server(ttft_s=0.05, itl_s=0.01)
    ...
    entries = server.log()   # list of dicts, one per request
    server.stop()

Every knob can also be overridden per request by a JSON object under the body key "scripted"
(e.g. extra_body={"scripted": {"fault": "http_500"}}), so one server serves a whole fault matrix.
Knobs: ttft_s, itl_s, tokens_per_chunk, output_tokens (None = max_tokens), usage (bool),
reasoning_tokens (chat: that many tokens first as reasoning_content), fault, fault_after_chunks,
huge_line_bytes, slow_loris_interval_s, model, max_model_len, kv_capacity_tokens, error_echo_auth
(an HTTP error's message repeats the Authorization header, to test that the client scrubs it),
api_key, vocab_size, check_model (server-wide only: they answer as vLLM 0.32.0 does), auth_fail_after
(server-wide: after that many completion requests, 401 to everything but /health, as a key revoked mid-run).
Faults: http_500 http_503 http_429 malformed_json missing_done truncated huge_line
wrong_content_type stall never_answer slow_loris reset error_event close_after_response drop_reused.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

DEFAULTS = {
    "ttft_s": 0.0,
    "itl_s": 0.0,
    "tokens_per_chunk": 1,
    "output_tokens": None,
    "usage": True,
    "reasoning_tokens": 0,
    "fault": None,
    "fault_after_chunks": 2,
    "huge_line_bytes": 5 * 1024 * 1024,
    "slow_loris_interval_s": 0.2,
    "model": "scripted-model",
    "max_model_len": 8192,
    "kv_capacity_tokens": 65536,
    "error_echo_auth": False,
    "api_key": None,  # set: every endpoint but /health answers 401 {"error": "Unauthorized"} without this key (vLLM --api-key)
    "vocab_size": None,  # set: a token id >= it is HTTP 400 "Token id N is out of vocabulary" (vLLM 0.32.0's answer)
    "check_model": False,  # True: a request for another model is HTTP 404 "The model `x` does not exist." (vLLM)
    "auth_fail_after": None,  # N: after N completion requests, every endpoint but /health answers 401 (a revoked key)
    "auth_fail_status": 401,  # the status auth_fail_after answers with (403: a key the server forbids)
}
FAULTS = (
    "http_500",
    "http_503",
    "http_429",
    "malformed_json",
    "missing_done",
    "truncated",
    "huge_line",
    "wrong_content_type",
    "stall",
    "never_answer",
    "slow_loris",
    "reset",
    "error_event",
    "close_after_response",
    "drop_reused",
)


# ----------------------------------------------------------------------------------------------
# the server (runs in the child process)
# ----------------------------------------------------------------------------------------------


def _serve(config: dict, log_path: str) -> None:
    from aiohttp import web

    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    conn_requests: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
    state = {"running": 0, "served": 0, "preemptions": 0, "completion_posts": 0}

    def log(entry: dict) -> None:
        os.write(log_fd, (json.dumps(entry) + "\n").encode())

    def knobs_for(body: dict) -> dict:
        k = dict(config)
        override = body.get("scripted") if isinstance(body, dict) else None
        if isinstance(override, dict):
            k.update(override)
        return k

    def prompt_len(body: dict) -> int:
        if "messages" in body:
            return sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        prompt = body.get("prompt", "")
        return len(prompt) if isinstance(prompt, list) else len(str(prompt).split())

    async def models(request):
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": config["model"], "object": "model", "max_model_len": config["max_model_len"]}],
            }
        )

    async def tokenize(request):
        body = await request.json()
        text = body.get("prompt", body.get("content", ""))
        tokens = [int(hashlib.sha256(w.encode()).hexdigest()[:6], 16) for w in str(text).split()]
        return web.json_response({"tokens": tokens, "count": len(tokens), "max_model_len": config["max_model_len"]})

    async def metrics(request):
        cap = config["kv_capacity_tokens"]
        text = (
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="16",engine="0",num_gpu_blocks="{cap // 16}"}} 1.0\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="{config["model"]}"}} {state["running"]}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{engine="0",model_name="{config["model"]}"}} 0.0\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="{config["model"]}"}} {min(1.0, state["running"] * 0.01)}\n'
            "# TYPE vllm:num_preemptions_total counter\n"
            f'vllm:num_preemptions_total{{engine="0",model_name="{config["model"]}"}} {float(state["served"])}\n'
        )
        return web.Response(text=text, content_type="text/plain")

    def chunk_json(chat: bool, model: str, text: str, reasoning: bool, finish: str | None, usage: dict | None) -> bytes:
        if chat:
            delta = {"reasoning_content": text} if reasoning else {"content": text}
            obj = {
                "id": "cmpl-s",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        else:
            obj = {
                "id": "cmpl-s",
                "object": "text_completion",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
            }
        if usage is not None:
            obj["usage"] = usage
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    def reset_connection(request) -> None:
        transport = request.transport
        if transport is None:
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        transport.abort()

    async def completions(request):
        received_at = time.perf_counter()
        raw = await request.read()
        body_read_at = time.perf_counter()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        k = knobs_for(body)
        fault = k["fault"]
        chat = request.path.endswith("/chat/completions")
        auth = request.headers.get("Authorization")
        entry = {
            "path": request.path,
            "body": body,
            "received_at": received_at,
            "body_read_at": body_read_at,
            "auth_sha256": hashlib.sha256(auth.encode()).hexdigest() if auth else None,
            "fault": fault,
            "chunk_send_times": [],
            "chunk_tokens": [],
            "completed": False,
        }
        transport = request.transport
        n_on_conn = conn_requests.get(transport, 0) + 1 if transport is not None else 1
        if transport is not None:
            conn_requests[transport] = n_on_conn
        entry["request_on_connection"] = n_on_conn
        if fault == "drop_reused" and n_on_conn > 1:
            entry["dropped"] = True
            log(entry)
            transport.close()  # like llama.cpp: a kept-alive connection closed without an answer
            return web.Response(status=500)  # never reaches the client
        if fault in ("http_500", "http_503", "http_429"):
            status = int(fault[5:])
            entry["status"] = status
            log(entry)
            headers = {"Retry-After": "1"} if status == 429 else None
            message = f"scripted {status}" + (f" (you sent {auth})" if k["error_echo_auth"] else "")
            return web.json_response(
                {"error": {"message": message, "type": "scripted", "code": status}}, status=status, headers=headers
            )
        if fault == "never_answer":
            log(dict(entry, received=True))
            await asyncio.sleep(3600)
        if fault == "wrong_content_type":
            log(dict(entry, status=200))
            return web.Response(text="<html>not an event stream</html>", content_type="text/html")
        stream = bool(body.get("stream"))
        model = body.get("model") or k["model"]
        n_out = int(k["output_tokens"] if k["output_tokens"] is not None else body.get("max_tokens") or 16)
        per = max(1, int(k["tokens_per_chunk"]))
        n_reason = int(k["reasoning_tokens"]) if chat else 0
        p_len = prompt_len(body)
        opts = body.get("stream_options") or {}
        continuous = bool(opts.get("continuous_usage_stats"))
        include_usage = bool(opts.get("include_usage")) and k["usage"]
        state["running"] += 1
        try:
            if not stream:
                await asyncio.sleep(k["ttft_s"] + k["itl_s"] * max(0, (n_out + per - 1) // per - 1))
                text = "tok " * n_out
                usage = {"prompt_tokens": p_len, "completion_tokens": n_out, "total_tokens": p_len + n_out}
                if chat:
                    obj = {
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                        ]
                    }
                else:
                    obj = {"choices": [{"index": 0, "text": text, "finish_reason": "length"}]}
                obj["usage"] = usage
                entry["completed"] = True
                entry["end_at"] = time.perf_counter()
                log(entry)
                return web.json_response(obj)
            resp = web.StreamResponse(
                status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            await resp.prepare(request)
            entry["headers_sent_at"] = time.perf_counter()
            if fault == "slow_loris":
                log(dict(entry, slow_loris=True))
                payload = chunk_json(chat, model, "tok ", False, None, None)
                while True:
                    for b in payload:
                        await asyncio.sleep(k["slow_loris_interval_s"])
                        await resp.write(bytes([b]))
            if chat:  # vLLM's first chat chunk: the role, empty content (must not count as a token)
                await resp.write(
                    b"data: "
                    + json.dumps(
                        {
                            "choices": [
                                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                            ],
                            "model": model,
                        }
                    ).encode()
                    + b"\n\n"
                )
            start = time.perf_counter()
            sent = 0
            i = 0
            while sent < n_out:
                if i == k["fault_after_chunks"] and fault in (
                    "malformed_json",
                    "stall",
                    "reset",
                    "truncated",
                    "huge_line",
                    "error_event",
                ):
                    entry["fault_at_chunk"] = i
                    log(entry)
                    if fault == "malformed_json":
                        await resp.write(b'data: {"choices": [{"text": "broken\n\n')
                        await resp.write(b"data: [DONE]\n\n")
                        await resp.write_eof()
                        return resp
                    if fault == "error_event":
                        await resp.write(
                            b'data: {"error": {"message": "scripted failure", "type": "InternalServerError", "code": 500}}\n\n'
                        )
                        await resp.write_eof()
                        return resp
                    if fault == "stall":
                        await asyncio.sleep(3600)
                    if fault == "reset":
                        reset_connection(request)
                        return resp
                    if fault == "truncated":
                        await resp.write(b'data: {"choices": [{"te')
                        request.transport.close()
                        return resp
                    if fault == "huge_line":
                        piece = b"x" * 65536
                        await resp.write(b"data: ")
                        for _ in range(k["huge_line_bytes"] // len(piece) + 1):
                            await resp.write(piece)
                        await resp.write(b"\n\n")
                        await resp.write_eof()
                        return resp
                target = start + k["ttft_s"] + i * k["itl_s"]
                delay = target - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                n = min(per, n_out - sent)
                reasoning = sent < n_reason
                finish = "length" if sent + n >= n_out else None
                usage = None
                if continuous:
                    usage = {"prompt_tokens": p_len, "completion_tokens": sent + n, "total_tokens": p_len + sent + n}
                data = chunk_json(chat, model, "tok " * n, reasoning, finish, usage)
                entry["chunk_send_times"].append(time.perf_counter())
                await resp.write(data)
                entry["chunk_tokens"].append(n)
                sent += n
                i += 1
            if include_usage:
                await resp.write(
                    b"data: "
                    + json.dumps(
                        {
                            "choices": [],
                            "model": model,
                            "usage": {
                                "prompt_tokens": p_len,
                                "completion_tokens": n_out,
                                "total_tokens": p_len + n_out,
                            },
                        }
                    ).encode()
                    + b"\n\n"
                )
            if fault != "missing_done":
                await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            entry["completed"] = True
            entry["end_at"] = time.perf_counter()
            log(entry)
            state["served"] += 1
            if fault == "close_after_response" and request.transport is not None:
                request.transport.close()
            return resp
        finally:
            state["running"] -= 1

    async def health(request):
        return web.Response(text="ok")

    @web.middleware
    async def like_vllm(request, handler):
        """api_key / vocab_size / check_model: refuse as vLLM 0.32.0 does (bodies as it answered them)."""
        key = config.get("api_key")
        if key and request.path != "/health" and request.headers.get("Authorization") != f"Bearer {key}":
            log({"path": request.path, "status": 401, "body": {}})
            return web.json_response({"error": "Unauthorized"}, status=401)
        revoked_after = config.get("auth_fail_after")
        if revoked_after is not None and request.path != "/health":
            if state["completion_posts"] >= revoked_after:
                status = int(config.get("auth_fail_status") or 401)
                log({"path": request.path, "status": status, "body": {}, "revoked": True})
                return web.json_response({"error": "Unauthorized" if status == 401 else "Forbidden"}, status=status)
            if request.method == "POST" and request.path.endswith("completions"):
                state["completion_posts"] += 1
        if request.method == "POST" and request.path.startswith("/v1/"):
            try:
                body = json.loads(await request.read())
            except ValueError:
                body = {}
            prompt = body.get("prompt") if isinstance(body, dict) else None
            vocab = config.get("vocab_size")
            if vocab and isinstance(prompt, list) and any(int(t) >= vocab for t in prompt):
                bad = next(int(t) for t in prompt if int(t) >= vocab)
                log({"path": request.path, "status": 400, "body": body})
                return web.json_response(
                    {
                        "error": {
                            "message": f"Token id {bad} is out of vocabulary",
                            "type": "BadRequestError",
                            "param": None,
                            "code": 400,
                        }
                    },
                    status=400,
                )
            if config.get("check_model") and isinstance(body, dict) and body.get("model") != config["model"]:
                log({"path": request.path, "status": 404, "body": body})
                return web.json_response(
                    {
                        "error": {
                            "message": f"The model `{body.get('model')}` does not exist.",
                            "type": "NotFoundError",
                            "param": "model",
                            "code": 404,
                        }
                    },
                    status=404,
                )
        return await handler(request)

    async def main() -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[like_vllm])
        app.router.add_post("/v1/completions", completions)
        app.router.add_post("/v1/chat/completions", completions)
        app.router.add_get("/v1/models", models)
        app.router.add_post("/tokenize", tokenize)
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/health", health)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", int(config.get("port", 0)), backlog=4096)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        print(f"LISTENING {port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        await stop.wait()
        await runner.cleanup()

    asyncio.run(main())


# ----------------------------------------------------------------------------------------------
# the test-side handle
# ----------------------------------------------------------------------------------------------


class ScriptedServer:
    """Handle on a running scripted server process: url, log(), stop()."""

    def __init__(self, proc: subprocess.Popen, url: str, log_path: Path, tmpdir: tempfile.TemporaryDirectory | None):
        self.proc = proc
        self.url = url
        self.log_path = log_path
        self._tmpdir = tmpdir

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> list[dict]:
        """Entries logged so far, one per request (a line being written is skipped)."""
        out = []
        if not self.log_path.exists():
            return out
        for line in self.log_path.read_bytes().splitlines(keepends=True):
            if line.endswith(b"\n"):
                out.append(json.loads(line))
        return out

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)
        if self.proc.stdout:
            self.proc.stdout.close()

    def kill(self) -> None:
        """SIGKILL (a server dying mid-level)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def __enter__(self) -> "ScriptedServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()


def start_scripted_server(
    log_path: str | os.PathLike | None = None, start_timeout_s: float = 20.0, **knobs
) -> tuple[str, ScriptedServer]:
    """Start the server in a subprocess on a free 127.0.0.1 port; returns (base_url, handle).

    The handle's stop() ends it by PID (SIGTERM, then SIGKILL). Unknown knobs raise ValueError.
    """
    unknown = set(knobs) - set(DEFAULTS) - {"port"}
    if unknown:
        raise ValueError(f"unknown scripted-server knobs: {sorted(unknown)}")
    if knobs.get("fault") not in (None, *FAULTS):
        raise ValueError(f"unknown fault {knobs['fault']!r}; one of {FAULTS}")
    config = dict(DEFAULTS, **knobs)
    tmpdir = None
    if log_path is None:
        tmpdir = tempfile.TemporaryDirectory(prefix="kneecap-scripted-")
        log_path = Path(tmpdir.name) / "server.jsonl"
    log_path = Path(log_path)
    proc = subprocess.Popen(
        [sys.executable, __file__, json.dumps(config), str(log_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + start_timeout_s
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    line = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if sel.select(timeout=0.1):
            line = proc.stdout.readline()
            break
    sel.close()
    if not line.startswith("LISTENING "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"scripted server did not start (exit code {proc.poll()})")
    port = int(line.split()[1])
    return f"http://127.0.0.1:{port}", ScriptedServer(proc, f"http://127.0.0.1:{port}", log_path, tmpdir)


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]), sys.argv[2])
