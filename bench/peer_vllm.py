"""Run vLLM's own benchmark client (`vllm bench serve`'s `benchmark()` coroutine) at one level.

Runs under bench/.peers/venv (see install_peers.sh), never under kneecap's .venv. The code
measured is vLLM's, unchanged: vllm/benchmarks/serve.py (the request loop, semaphore,
metrics) and vllm/benchmarks/lib/endpoint_request_func.py (the per-request SSE hot path),
unpacked from the vllm wheel into bench/.peers/vllm_src. vllm's package __init__ (which needs
torch) is not run: the few vllm modules serve.py imports but does not use on this path
(datasets, tokenizer loading, argparse and network helpers) are replaced by stubs below.
With tokenizer=None vLLM counts output tokens from the server's usage chunk, which the
server sends (vLLM's client asks for stream_options.include_usage).

  python bench/peer_vllm.py --base-url URL --concurrency C --requests N --isl I --osl O --out result.json

Writes {client, concurrency, requests, completed, duration_s, output_tokens, cpu_s, ttft_ms:[...],
itl_ms:[...], per_request:[{sha256, ok, sent_s, chunk_times_s, chunk_tokens}]} where cpu_s is this
process's user+system CPU time during the benchmark and per-request times are vLLM's own
time.perf_counter() stamps (CLOCK_MONOTONIC, the clock fast_server.js logs on).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import resource
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
VLLM_SRC = HERE / ".peers" / "vllm_src"


@dataclasses.dataclass
class SampleRequest:  # same fields as vllm.benchmarks.datasets.datasets.SampleRequest (vllm 0.33.0)
    prompt: object
    prompt_len: int
    expected_output_len: int = 0
    multi_modal_data: object = None
    lora_request: object = None
    request_id: str | None = None
    timestamp: float | None = None
    chat_messages: list | None = None
    request_overrides: dict | None = None


def _install_stubs() -> None:
    if not (VLLM_SRC / "vllm" / "benchmarks" / "serve.py").is_file():
        sys.exit(f"error: vLLM benchmark code not found in {VLLM_SRC} — run bench/install_peers.sh")

    def module(name: str, **attrs) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
        return mod

    module("vllm", __path__=[str(VLLM_SRC / "vllm")])  # a namespace for the unpacked sources, no __init__
    module(
        "vllm.benchmarks.datasets",
        SampleRequest=SampleRequest,
        add_dataset_parser=lambda parser: None,
        get_samples=lambda *a, **k: [],
    )
    module("vllm.tokenizers", TokenizerLike=object, get_tokenizer=lambda *a, **k: None)
    module("vllm.utils", __path__=[])
    module("vllm.utils.argparse_utils", FlexibleArgumentParser=argparse.ArgumentParser)
    module("vllm.utils.gc_utils", freeze_gc_heap=lambda: None)
    module("vllm.utils.network_utils", join_host_port=lambda host, port: f"{host}:{port}")
    import logging

    module("vllm.logger", init_logger=logging.getLogger)


def _sha256(prompt: str) -> str:
    import hashlib

    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def make_requests(num: int, isl: int, osl: int) -> list[SampleRequest]:
    """Unique prompts of `isl` whitespace words (the Node server counts words as tokens)."""
    return [
        SampleRequest(prompt=" ".join([f"r{i}"] + ["w"] * (isl - 1)), prompt_len=isl, expected_output_len=osl)
        for i in range(num)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--isl", type=int, default=16)
    parser.add_argument("--osl", type=int, default=64)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    _install_stubs()
    from vllm.benchmarks import serve  # noqa: E402  (after the stubs)

    requests = make_requests(args.requests, args.isl, args.osl)
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    result = asyncio.run(
        serve.benchmark(
            task_type=serve.TaskType.GENERATION,
            endpoint_type="openai",
            api_url=args.base_url + "/v1/completions",
            base_url=args.base_url,
            model_id="fast-scripted",
            model_name="fast-scripted",
            tokenizer=None,
            input_requests=requests,
            logprobs=None,
            request_rate=float("inf"),
            burstiness=1.0,
            disable_tqdm=True,
            num_warmups=0,
            profile=False,
            selected_percentile_metrics=["ttft", "itl"],
            selected_percentiles=[50.0, 99.0],
            ignore_eos=True,
            goodput_config_dict={},
            max_concurrency=args.concurrency,
            lora_modules=None,
            extra_headers=None,
            extra_body=None,
            ready_check_timeout_sec=60,
        )
    )
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    per_request = []
    for req, start, ttft, itl, error in zip(
        requests, result["start_times"], result["ttfts"], result["itls"], result["errors"]
    ):
        if not ttft or error:
            per_request.append({"sha256": _sha256(req.prompt), "ok": False})
            continue
        times = [start + ttft]
        for gap in itl:  # vLLM's ITL: one gap per SSE event carrying text (here one token each)
            times.append(times[-1] + gap)
        per_request.append(
            {
                "sha256": _sha256(req.prompt),
                "ok": True,
                "sent_s": start,
                "chunk_times_s": times,
                "chunk_tokens": [1] * len(times),
            }
        )
    out = {
        "client": "vllm",
        "concurrency": args.concurrency,
        "requests": args.requests,
        "completed": result["completed"],
        "duration_s": result["duration"],
        "output_tokens": result["total_output_tokens"],
        "cpu_s": cpu_s,
        "warmup_requests": 1,  # the ready check sends one request before the clock starts
        "clock": "monotonic",  # start_times are time.perf_counter() = CLOCK_MONOTONIC on Linux
        "ttft_ms": [t * 1000.0 for t in result["ttfts"] if t],
        "itl_ms": [g * 1000.0 for per_request in result["itls"] for g in per_request],
        "per_request": per_request,
    }
    Path(args.out).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.stdout = open(os.devnull, "w")  # vLLM prints its own report; the harness reads --out
    sys.exit(main())
