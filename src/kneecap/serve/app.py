"""The aiohttp routes of `kneecap serve`: an OpenAI-compatible front of the simulated engine.

Owns HTTP only: routes, status codes and streaming writes; the bodies come from openai_wire.py, the
tokens from realtime.py, /metrics from prom.py. Routes follow vLLM's OpenAI server
(vllm/entrypoints/openai/api_server.py): /v1/completions, /v1/chat/completions, /v1/models (with
max_model_len), /tokenize, /detokenize, /health, /version, /metrics.
"""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from kneecap.errors import KneecapError
from kneecap.serve import openai_wire as wire
from kneecap.serve.prom import exposition
from kneecap.serve.pseudo_tokens import decode_ids, encode_text
from kneecap.serve.realtime import RealtimeEngine

ENGINE_KEY = web.AppKey("engine", RealtimeEngine)
INFO_KEY = web.AppKey("info", dict)
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def _json(obj, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def _error(message: str, status: int = 400, param: str | None = None) -> web.Response:
    err_type = "BadRequestError" if status == 400 else ("NotFoundError" if status == 404 else "InternalServerError")
    return web.Response(
        body=wire.error_body(message, status, err_type, param), status=status, content_type="application/json"
    )


async def _body(request: web.Request):
    raw = await request.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise wire.BadRequest("the request body is not valid JSON") from None


async def _generate(request: web.Request, endpoint: str) -> web.StreamResponse:
    rt = request.app[ENGINE_KEY]
    info = request.app[INFO_KEY]
    try:
        req = wire.parse_request(
            endpoint, await _body(request), served_model=info["model"], max_model_len=info["max_model_len"]
        )
        slot = rt.submit(req.prompt_tokens, req.max_tokens, req.prompt_ids)
    except wire.BadRequest as exc:
        return _error(exc.message, 400, exc.param)
    except KneecapError as exc:
        return _error(exc.message, 400 if rt.failure is None else 500)
    request_id = ("cmpl-" if endpoint == wire.COMPLETIONS else "chatcmpl-") + slot.request_id.removeprefix("cmpl-")
    created = int(time.time())
    finished = False
    try:
        if not req.stream:
            while not slot.done:
                slot.wake.clear()
                if not slot.done:
                    await slot.wake.wait()
            if slot.error:
                return _error(f"generation failed: {slot.error}", 500)
            finished = True
            return web.Response(
                body=wire.full_response(req, request_id, created, slot.cached_tokens), content_type="application/json"
            )
        writer = wire.ChunkWriter(req, request_id, created)
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        opening = writer.opening()
        if opening:
            await resp.write(opening)
        sent = 0
        while True:
            ready = slot.ready
            if ready > sent:
                await resp.write(writer.tokens(sent, ready))
                sent = ready
                continue
            if slot.done:
                break
            slot.wake.clear()
            if slot.ready > sent or slot.done:
                continue
            await slot.wake.wait()
        if slot.error:
            await resp.write(
                b"data: "
                + orjson.dumps(
                    {
                        "error": {
                            "message": f"generation failed: {slot.error}",
                            "type": "InternalServerError",
                            "code": 500,
                        }
                    }
                )
                + b"\n\n"
            )
        else:
            await resp.write(writer.closing(slot.cached_tokens))
            finished = True
        await resp.write_eof()
        return resp
    finally:
        if not finished:
            rt.abort(slot)  # client gone (or cancelled): free the engine's blocks


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, wire.COMPLETIONS)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, wire.CHAT)


async def models(request: web.Request) -> web.Response:
    info = request.app[INFO_KEY]
    card = {
        "id": info["model"],
        "object": "model",
        "created": info["created"],
        "owned_by": "kneecap",
        "root": info["model"],
        "parent": None,
        "max_model_len": info["max_model_len"],
        "permission": [],
    }
    return _json({"object": "list", "data": [card]})


async def tokenize(request: web.Request) -> web.Response:
    """vLLM's /tokenize: {"prompt"} or {"messages"} -> {"count", "max_model_len", "tokens"} (pseudo-tokenizer)."""
    info = request.app[INFO_KEY]
    try:
        body = await _body(request)
        if not isinstance(body, dict):
            raise wire.BadRequest("the request body must be a JSON object")
        if "messages" in body:
            ids = encode_text(" ".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict)))
        else:
            prompt = body.get("prompt", body.get("content"))
            if not isinstance(prompt, str):
                raise wire.BadRequest("prompt must be a string", "prompt")
            ids = encode_text(prompt)
    except wire.BadRequest as exc:
        return _error(exc.message, 400, exc.param)
    return _json({"count": len(ids), "max_model_len": info["max_model_len"], "tokens": ids})


async def detokenize(request: web.Request) -> web.Response:
    try:
        body = await _body(request)
        ids = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise wire.BadRequest("tokens must be a list of integers", "tokens")
    except wire.BadRequest as exc:
        return _error(exc.message, 400, exc.param)
    return _json({"prompt": decode_ids(ids)})


async def health(request: web.Request) -> web.Response:
    rt = request.app[ENGINE_KEY]
    if rt.failure:
        return _error(f"simulated engine stopped: {rt.failure}", 500)
    return web.Response(status=200)


async def reset_prefix_cache(request: web.Request) -> web.Response:
    """vLLM's POST /reset_prefix_cache: drop the prefix cache (refused with 409 while requests hold blocks; vLLM
    logs its refusal and answers 200, kneecap says so in the status)."""
    rt = request.app[ENGINE_KEY]
    if rt.reset_prefix_cache():
        return web.Response(status=200)
    return _error("prefix cache not reset: requests still hold KV blocks", 409)


async def version(request: web.Request) -> web.Response:
    info = request.app[INFO_KEY]
    return _json({"version": info["version"], "simulated": True, "target": info["target"]})


async def metrics(request: web.Request) -> web.Response:
    rt = request.app[ENGINE_KEY]
    text = exposition(request.app[INFO_KEY]["model"], rt.gauges(), rt.counters)
    return web.Response(
        text=text, content_type="text/plain", charset="utf-8", headers={"X-Content-Type-Options": "nosniff"}
    )


async def replica_metrics(request: web.Request) -> web.Response:
    """/replicas/I/metrics: replica I's own /metrics (kneecap serve --replicas)."""
    rt = request.app[ENGINE_KEY]
    replicas = getattr(rt, "replicas", [rt])
    try:
        one = replicas[int(request.match_info["index"])]
    except (ValueError, IndexError):
        return _error(f"no replica {request.match_info['index']!r}: replicas are 0..{len(replicas) - 1}", 404)
    text = exposition(request.app[INFO_KEY]["model"], one.gauges(), one.counters)
    return web.Response(
        text=text, content_type="text/plain", charset="utf-8", headers={"X-Content-Type-Options": "nosniff"}
    )


def build_app(
    target,
    *,
    time_scale: float = 1.0,
    served_model_name: str | None = None,
    replicas: int = 1,
    router: str = "round-robin",
) -> web.Application:
    """The aiohttp Application; the engine task starts with the app and stops with it. replicas > 1: that many
    engines behind `router` (kneecap.serve.fleet)."""
    from kneecap import __version__

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[INFO_KEY] = {
        "model": served_model_name or target.model_name,
        "max_model_len": target.plan.context,
        "created": int(time.time()),
        "version": f"kneecap-serve {__version__} (simulated engine)",
        "target": target.describe(),
    }

    async def on_startup(app: web.Application) -> None:
        if replicas > 1 or router != "round-robin":
            from kneecap.serve.fleet import FleetRuntime

            app[ENGINE_KEY] = FleetRuntime(target, replicas, router, time_scale=time_scale)
        else:
            app[ENGINE_KEY] = RealtimeEngine(target, time_scale=time_scale)
        app[ENGINE_KEY].start()

    async def on_cleanup(app: web.Application) -> None:
        await app[ENGINE_KEY].stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    app.router.add_get("/replicas/{index}/metrics", replica_metrics)
    return app
