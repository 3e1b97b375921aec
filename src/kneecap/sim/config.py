"""EngineConfig: the scheduler limits of the simulated engine, with named vLLM-like and SGLang-like defaults.

Owns the engine's knobs (sequence cap, per-step token budget, prefix caching, admission reserve);
not the KV pool size (that is the planner's `num_kv_blocks`) nor step-time constants (steptime.py).

Defaults, as the engines compute them when the user passes nothing:
  vLLM  (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, OpenAI API server context):
        a GPU with >= 70 GiB that is not an A100 -> max_num_batched_tokens 8192, max_num_seqs 1024;
        any other GPU -> 2048 and 256. V1 always chunks prefills and enables prefix caching by default
        (EngineArgs._set_default_args_v1: "V1 always uses chunked prefills", "V1 enables prefix
        caching by default"). Older V1 releases (0.8.x) used max_num_seqs 256 everywhere.
  SGLang (python/sglang/srt/server_args.py, chunked_prefill_size by GPU memory in MiB):
        < 35 GiB -> 2048, < 160 GiB -> 8192, else 16384; max_running_requests, when unset, is
        min(max(pool_tokens / context_len * 512, 2048), 4096), capped at pool_tokens // 2
        (model_runner.py, max_num_reqs). The radix (prefix) cache is on by default. New requests are
        admitted only if the pool can also hold new_token_ratio x their remaining output
        (SGLANG_INIT_NEW_TOKEN_RATIO 0.7, decaying by 0.001 per decode step to a floor of 0.1;
        reset after a retraction) — schedule_policy.py PrefillAdder.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kneecap.errors import KneecapError
from kneecap.units import GiB, MiB

ENGINE_DEFAULTS = ("vllm", "sglang")


@dataclass(frozen=True)
class EngineConfig:
    """Scheduler limits. Token counts are tokens; ratios are fractions of remaining output tokens."""

    name: str = "vllm"  # which engine's defaults these mimic ("vllm" | "sglang" | "custom")
    max_num_seqs: int = 256  # sequences running at once (vLLM --max-num-seqs, SGLang --max-running-requests)
    max_num_batched_tokens: int = 8192  # tokens per step (vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size)
    enable_prefix_caching: bool = True
    # SGLang-style admission reserve: admit only if free KV also holds ratio x remaining output of all
    # running + new sequences. 0 = vLLM behaviour (admit whenever the first chunk's blocks fit).
    init_new_token_ratio: float = 0.0
    min_new_token_ratio: float = 0.0
    new_token_ratio_decay: float = 0.0  # subtracted per decode step
    # vLLM's --scheduler-delay-factor (V0 scheduler, `Scheduler._passed_delay`): while sequences are
    # running, hold new prompts until the oldest waiting one has waited delay_factor x the latency of
    # the last step that ran prompts, so prompts batch together ("waiting to batch"). 0 = off (default).
    scheduler_delay_factor: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_num_seqs, int) or self.max_num_seqs < 1:
            raise KneecapError(f"--max-num-seqs must be a whole number >= 1, got {self.max_num_seqs!r}",
                               "pass e.g. --max-num-seqs 256")
        if not isinstance(self.max_num_batched_tokens, int) or self.max_num_batched_tokens < 1:
            raise KneecapError(f"--max-num-batched-tokens must be a whole number >= 1, got {self.max_num_batched_tokens!r}",
                               "pass e.g. --max-num-batched-tokens 8192")
        if not (0.0 <= self.min_new_token_ratio <= self.init_new_token_ratio <= 1.0):
            raise KneecapError(
                f"new-token ratios must satisfy 0 <= min ({self.min_new_token_ratio}) <= init ({self.init_new_token_ratio}) <= 1",
                "use e.g. init 0.7, min 0.1 (SGLang) or 0 and 0 (vLLM)")
        if self.scheduler_delay_factor < 0:
            raise KneecapError(f"--scheduler-delay-factor must be >= 0, got {self.scheduler_delay_factor}",
                               "pass e.g. 0 (off) or 0.5")
        if self.new_token_ratio_decay < 0:
            raise KneecapError(f"new_token_ratio_decay must be >= 0, got {self.new_token_ratio_decay}", "use e.g. 0.001")

    def with_overrides(self, *, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                       enable_prefix_caching: bool | None = None,
                       scheduler_delay_factor: float | None = None) -> "EngineConfig":
        """A copy with the user's flags applied (None keeps the default)."""
        changes = {}
        if max_num_seqs is not None:
            changes["max_num_seqs"] = max_num_seqs
        if max_num_batched_tokens is not None:
            changes["max_num_batched_tokens"] = max_num_batched_tokens
        if enable_prefix_caching is not None:
            changes["enable_prefix_caching"] = enable_prefix_caching
        if scheduler_delay_factor is not None:
            changes["scheduler_delay_factor"] = scheduler_delay_factor
        return replace(self, **changes) if changes else self


def vllm_defaults(device_bytes: int, gpu_name: str = "") -> EngineConfig:
    """vLLM's OpenAI-server defaults for a GPU reporting `device_bytes` of memory (EngineArgs.get_batch_defaults)."""
    if device_bytes >= 70 * GiB and "a100" not in gpu_name.lower():
        return EngineConfig(name="vllm", max_num_seqs=1024, max_num_batched_tokens=8192, enable_prefix_caching=True)
    return EngineConfig(name="vllm", max_num_seqs=256, max_num_batched_tokens=2048, enable_prefix_caching=True)


def sglang_defaults(device_bytes: int, pool_tokens: int, context_len: int) -> EngineConfig:
    """SGLang's defaults: chunked_prefill_size by GPU memory, max_running_requests from the pool size."""
    gpu_mib = device_bytes / MiB
    if gpu_mib < 35 * 1024:
        chunk = 2048
    elif gpu_mib < 160 * 1024:
        chunk = 8192
    else:
        chunk = 16384
    context_len = max(1, context_len)
    running = min(max(int(pool_tokens / context_len * 512), 2048), 4096)
    running = max(1, min(running, pool_tokens // 2))
    return EngineConfig(name="sglang", max_num_seqs=running, max_num_batched_tokens=chunk, enable_prefix_caching=True,
                        init_new_token_ratio=0.7, min_new_token_ratio=0.1, new_token_ratio_decay=0.001)


def engine_defaults(kind: str, *, device_bytes: int, gpu_name: str, pool_tokens: int, context_len: int) -> EngineConfig:
    """Named defaults: "vllm" or "sglang"."""
    if kind == "vllm":
        return vllm_defaults(device_bytes, gpu_name)
    if kind == "sglang":
        return sglang_defaults(device_bytes, pool_tokens, context_len)
    raise KneecapError(f"unknown --engine-defaults {kind!r}", f"use one of {', '.join(ENGINE_DEFAULTS)}")
