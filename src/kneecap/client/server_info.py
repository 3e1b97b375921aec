"""What a live engine reports about itself: which engine, which model, its context length, version,
and — the number preflight needs — how many tokens its KV cache holds.

Owns: reading GET /v1/models, /version, /metrics, /get_server_info, /props and /slots, and one pure
parser per payload (tested on captured / documented payloads). Does not judge fit (kneecap.plan).
Where each number comes from:
  vLLM      /metrics `vllm:cache_config_info` is an info gauge whose labels are CacheConfig's fields
            (vllm/engine/metrics.py + vllm/v1/metrics/loggers.py: labels = CacheConfig.metrics_info(),
            i.e. {field: str(value)}); newer vLLM adds the exact `kv_cache_size_tokens` label (vLLM PR
            #42206; hybrid models have block sizes like 832, so blocks x block_size over-counts), older
            ones give num_gpu_blocks x block_size; summed over the `engine` label (data parallel);
            /version -> {"version"}; /v1/models data[0] carries max_model_len.
  SGLang    /get_server_info -> server args plus `max_total_num_tokens` (the KV pool in tokens), newer
            versions also per-rank `internal_states[i].memory_usage.token_capacity`, and `version`
            (SGLang docs, "Native APIs", captured output).
  llama.cpp /props -> `default_generation_settings.n_ctx` (tokens per slot: -c / -np unless
            --kv-unified) and `total_slots` (-np), `build_info` (tools/server/server-context.cpp,
            get_props); the KV pool is n_ctx per slot x total_slots (with --kv-unified the slots share
            one n_ctx pool, which /props does not say: then this over-counts by total_slots).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from kneecap.client.server_metrics import parse_prometheus
from kneecap.errors import KneecapError

VLLM = "vllm"
SGLANG = "sglang"
LLAMACPP = "llama.cpp"


@dataclass(frozen=True)
class ServerInfo:
    """What the server said. kv_capacity_tokens is None when it does not report its KV pool."""

    base_url: str
    engine: str | None = None
    model_id: str | None = None
    max_model_len: int | None = None
    kv_capacity_tokens: int | None = None
    kv_capacity_source: str | None = None  # which field(s) the capacity came from
    block_size: int | None = None
    num_slots: int | None = None  # llama.cpp total_slots / SGLang max_running_requests
    slot_context_tokens: int | None = None  # llama.cpp: tokens one slot holds
    vocab_size: int | None = None
    version: str | None = None
    notes: tuple[str, ...] = ()
    model_ids: tuple[str, ...] = ()  # every id GET /v1/models listed
    models_status: int | None = None  # HTTP status of GET /v1/models (None: no answer)
    models_json: bool = False  # did it answer an OpenAI model list (JSON with a "data" list)?
    simulated: bool = False  # /version said {"simulated": true}: kneecap's simulated engine, no model runs

    def to_dict(self) -> dict:
        d = asdict(self)
        d["notes"] = list(self.notes)
        d["model_ids"] = list(self.model_ids)
        return d


def _int(value: Any) -> int | None:
    try:
        if value is None or isinstance(value, bool):
            return None
        return int(float(value))
    except (TypeError, ValueError):
        return None


def _ints(obj: Mapping, names: Mapping[str, str]) -> dict:
    """{our name: int} for each of obj's fields in `names` ({its name: ours}) that holds a nonzero number."""
    return {ours: _int(obj.get(theirs)) for theirs, ours in names.items() if _int(obj.get(theirs))}


def parse_models(obj: Any) -> dict:
    """GET /v1/models: first model's id, max_model_len (vLLM, SGLang), owned_by, llama.cpp meta."""
    out: dict[str, Any] = {}
    data = obj.get("data") if isinstance(obj, Mapping) else None
    if not data or not isinstance(data[0], Mapping):
        return out
    first = data[0]
    out["model_ids"] = tuple(str(m["id"]) for m in data if isinstance(m, Mapping) and m.get("id") is not None)
    out["model_id"] = first.get("id")
    out["owned_by"] = first.get("owned_by")
    out.update(_ints(first, {"max_model_len": "max_model_len"}))
    meta = first.get("meta")
    if isinstance(meta, Mapping):  # llama.cpp
        out.update(_ints(meta, {"n_vocab": "vocab_size", "n_ctx_train": "n_ctx_train"}))
    return out


def parse_vllm_cache_config(metrics_text: str) -> dict:
    """kv tokens from `vllm:cache_config_info` labels (num_gpu_blocks x block_size, summed over engines)."""
    samples = parse_prometheus(metrics_text, ("vllm:cache_config_info",)).get("vllm:cache_config_info", [])
    per_engine: dict[str, tuple[int, int, int]] = {}  # engine -> (tokens, blocks, block_size)
    exact = True
    for labels, _ in samples:
        blocks = _int(labels.get("num_gpu_blocks"))
        size = _int(labels.get("block_size"))
        tokens = _int(labels.get("kv_cache_size_tokens"))  # newer vLLM: exact, also for hybrid models
        if not tokens and blocks and size:
            tokens, exact = blocks * size, False
        if tokens:
            per_engine[labels.get("engine", "0")] = (tokens, blocks or 0, size or 0)
    if not per_engine:
        return {"present": bool(samples)}
    source = (
        "vllm /metrics vllm:cache_config_info kv_cache_size_tokens"
        if exact
        else "vllm /metrics vllm:cache_config_info num_gpu_blocks x block_size"
    )
    return {
        "present": True,
        "kv_capacity_tokens": sum(t for t, _, _ in per_engine.values()),
        "block_size": min(s for _, _, s in per_engine.values()) or None,
        "num_engines": len(per_engine),
        "num_gpu_blocks": sum(b for _, b, _ in per_engine.values()),
        "source": source,
    }


def parse_sglang_server_info(obj: Any) -> dict:
    """GET /get_server_info: max_total_num_tokens (or per-rank token_capacity), max_running_requests, version."""
    if not isinstance(obj, Mapping):
        return {}
    out: dict[str, Any] = {}
    kv = _int(obj.get("max_total_num_tokens"))
    source = "max_total_num_tokens"
    states = obj.get("internal_states")
    if kv is None and isinstance(states, list):
        caps = []
        for st in states:
            if not isinstance(st, Mapping):
                continue
            cap = _int(st.get("max_total_num_tokens"))
            mem = st.get("memory_usage")
            if cap is None and isinstance(mem, Mapping):
                cap = _int(mem.get("token_capacity"))
            if cap:
                caps.append(cap)
        if caps:
            kv, source = sum(caps), "internal_states[].memory_usage.token_capacity"
    if kv:
        out["kv_capacity_tokens"] = kv
        out["kv_capacity_source"] = f"sglang /get_server_info {source}"
    out.update(
        _ints(obj, {"max_running_requests": "num_slots", "page_size": "block_size", "context_length": "max_model_len"})
    )
    if isinstance(obj.get("version"), str):
        out["version"] = obj["version"]
    out["is_sglang"] = kv is not None or "internal_states" in obj or "max_total_num_tokens" in obj
    return out


def parse_llamacpp_props(props: Any, slots: Any = None) -> dict:
    """GET /props (+ optional GET /slots): per-slot n_ctx x total_slots, build_info."""
    if not isinstance(props, Mapping):
        return {}
    out: dict[str, Any] = {}
    settings = props.get("default_generation_settings")
    n_ctx = _int(settings.get("n_ctx")) if isinstance(settings, Mapping) else None
    total = _int(props.get("total_slots"))
    if total is None and isinstance(slots, list):
        total = len(slots)
    if n_ctx is None and isinstance(slots, list) and slots and isinstance(slots[0], Mapping):
        n_ctx = _int(slots[0].get("n_ctx"))
    if n_ctx:
        out["slot_context_tokens"] = n_ctx
    if total:
        out["num_slots"] = total
    if n_ctx and total:
        out["kv_capacity_tokens"] = n_ctx * total
        out["kv_capacity_source"] = "llama.cpp /props default_generation_settings.n_ctx x total_slots"
    if isinstance(props.get("build_info"), str):
        out["version"] = props["build_info"]
    out["is_llamacpp"] = isinstance(settings, Mapping) or "total_slots" in props
    return out


def combine(
    base_url: str,
    models: Any = None,
    version: Any = None,
    metrics_text: str | None = None,
    sglang_info: Any = None,
    props: Any = None,
    slots: Any = None,
    models_status: int | None = None,
) -> ServerInfo:
    """Assemble a ServerInfo from whichever payloads the server answered (None = not answered)."""
    fields: dict[str, Any] = {
        "models_status": models_status,
        "models_json": isinstance(models, Mapping) and isinstance(models.get("data"), list),
        "simulated": isinstance(version, Mapping) and version.get("simulated") is True,
    }
    notes: list[str] = []
    m = parse_models(models) if models is not None else {}
    for key in ("model_id", "max_model_len", "vocab_size", "model_ids"):
        if m.get(key) is not None:
            fields[key] = m[key]
    engine = None
    vllm = parse_vllm_cache_config(metrics_text) if metrics_text else {}
    sg = parse_sglang_server_info(sglang_info) if sglang_info is not None else {}
    lc = parse_llamacpp_props(props, slots) if props is not None else {}
    if vllm.get("present") or (metrics_text and "vllm:" in metrics_text) or m.get("owned_by") == "vllm":
        engine = VLLM
        if vllm.get("kv_capacity_tokens"):
            fields.update(
                kv_capacity_tokens=vllm["kv_capacity_tokens"],
                block_size=vllm["block_size"],
                kv_capacity_source=vllm["source"],
            )
            if vllm["num_engines"] > 1:
                notes.append(f"{vllm['num_engines']} engines (data parallel): capacity summed over them")
        else:
            notes.append("vLLM /metrics has no cache_config_info with num_gpu_blocks (metrics disabled or not ready)")
        if isinstance(version, Mapping) and isinstance(version.get("version"), str):
            fields["version"] = version["version"]
    elif sg.get("is_sglang"):
        engine = SGLANG
        fields.update(
            {
                k: sg[k]
                for k in ("kv_capacity_tokens", "kv_capacity_source", "num_slots", "block_size", "version")
                if sg.get(k) is not None
            }
        )
        if "max_model_len" not in fields and sg.get("max_model_len"):
            fields["max_model_len"] = sg["max_model_len"]
    elif lc.get("is_llamacpp"):
        engine = LLAMACPP
        fields.update(
            {
                k: lc[k]
                for k in ("kv_capacity_tokens", "kv_capacity_source", "num_slots", "slot_context_tokens", "version")
                if lc.get(k) is not None
            }
        )
        notes.append(
            "llama.cpp: a request longer than one slot's n_ctx is refused; with --kv-unified slots "
            "share one pool and the capacity is n_ctx, not n_ctx x total_slots"
        )
        if fields.get("slot_context_tokens") and "max_model_len" not in fields:
            fields["max_model_len"] = fields["slot_context_tokens"]
    elif m.get("owned_by") in ("sglang", "llamacpp"):
        engine = SGLANG if m["owned_by"] == "sglang" else LLAMACPP
    if engine is None:
        notes.append("engine not recognised (not vLLM, SGLang or llama.cpp): KV capacity unknown")
    elif fields.get("kv_capacity_tokens") is None:
        notes.append(f"{engine} did not report its KV capacity: pass --kv-tokens")
    return ServerInfo(base_url=base_url, engine=engine, notes=tuple(notes), **fields)


async def _get(session, url: str, headers: dict, timeout_s: float) -> tuple[int, bytes] | None:
    import aiohttp

    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return resp.status, await resp.content.read(32 * 1024 * 1024)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return None


def _json(answer: tuple[int, bytes] | None) -> Any:
    import orjson

    if answer is None or answer[0] != 200:
        return None
    try:
        return orjson.loads(answer[1])
    except orjson.JSONDecodeError:
        return None


def check_server_url(url: str, flag: str) -> None:
    """A KneecapError unless `url` is an http(s) server root kneecap can append /v1/... to: no user:password@ and
    no ?query or #fragment (where an API key would travel in the URL, into manifests and logs). The error never
    repeats what follows the host."""
    from urllib.parse import urlsplit

    if not url or not url.strip().startswith(("http://", "https://")):
        raise KneecapError(f"{flag} must be an http(s) URL, got {url!r}", f"pass e.g. {flag} http://127.0.0.1:8000")
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError as exc:
        raise KneecapError(f"{flag} is not a valid URL ({exc})", f"pass e.g. {flag} http://127.0.0.1:8000") from None
    root = f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port is not None else "")
    if "@" in parts.netloc:
        raise KneecapError(
            f"{flag} carries credentials before its host ({parts.scheme}://...@{parts.hostname or ''})",
            f"pass {flag} {root} and the API key in KNEECAP_API_KEY (or --api-key-env / --api-key-file)",
        )
    if parts.query or parts.fragment or url.strip().endswith(("?", "#")):
        raise KneecapError(
            f"{flag} has a ?query or #fragment after {root}{parts.path}",
            f"pass the server's root alone, e.g. {flag} {root}; an API key goes in KNEECAP_API_KEY "
            "(or --api-key-env / --api-key-file)",
        )


async def fetch_server_info_async(
    base_url: str,
    api_key: str | None = None,
    timeout_s: float = 5.0,
    *,
    flag: str = "--server",
    otherwise: str = "pass --kv-tokens N",
) -> ServerInfo:
    """Ask the server (all endpoints at once). Raises KneecapError only if nothing answered at all (or the URL is
    not http(s)); its hint names `flag`, where the user gave the URL, and `otherwise`, what else they can do."""
    import aiohttp

    root = base_url.strip().rstrip("/").removesuffix("/v1")
    if not root.startswith(("http://", "https://")):
        raise KneecapError(f"server URL {base_url!r} is not an http(s) URL", f"pass e.g. {flag} http://127.0.0.1:8000")
    check_server_url(base_url, flag)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    paths = ("/v1/models", "/version", "/metrics", "/get_server_info", "/props", "/slots")
    async with aiohttp.ClientSession() as session:
        answers = await asyncio.gather(*(_get(session, root + p, headers, timeout_s) for p in paths))
    if all(a is None for a in answers):
        raise KneecapError(
            f"cannot reach a server at {root}",
            f"check {flag} and that the server is up" + (f", or {otherwise}" if otherwise else ""),
        )
    got = dict(zip(paths, answers))
    metrics = got["/metrics"]
    metrics_text = metrics[1].decode("utf-8", "replace") if metrics is not None and metrics[0] == 200 else None
    models = got["/v1/models"]
    return combine(
        root,
        models=_json(models),
        version=_json(got["/version"]),
        metrics_text=metrics_text,
        sglang_info=_json(got["/get_server_info"]),
        props=_json(got["/props"]),
        slots=_json(got["/slots"]),
        models_status=models[0] if models is not None else None,
    )


def fetch_server_info(
    base_url: str,
    api_key: str | None = None,
    timeout_s: float = 5.0,
    *,
    flag: str = "--server",
    otherwise: str = "pass --kv-tokens N",
) -> ServerInfo:
    """Blocking wrapper for CLI commands (do not call from inside a running event loop)."""
    return asyncio.run(fetch_server_info_async(base_url, api_key, timeout_s, flag=flag, otherwise=otherwise))
