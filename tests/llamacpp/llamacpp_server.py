"""Run llama.cpp's own HTTP server (from the `xllamacpp` wheel) in a subprocess, and stop it by PID.

xllamacpp has no command line: `xllamacpp.Server(CommonParams)` starts llama.cpp's C++ server
inside the calling process and returns once it listens. This module is that missing command
(`python tests/llamacpp/llamacpp_server.py --model PATH --port N --parallel NP --ctx-size C`, from the
repo root) plus `start_llamacpp_server`, which runs this file as a script, waits for `/health` and returns a
handle. It owns processes and sockets only; the model file comes from tests/llamacpp/tiny_gguf.py.
It lives with the tests, not in the installed package: only tests and bench scripts start servers.

Facts relied on (xllamacpp 2026.10 `CommonParams` attributes, read from the installed wheel;
llama.cpp `tools/server/README.md`): `port=0` picks a free port and `Server.listening_address`
reports it; `n_parallel` is the slot count (`-np`), `n_ctx` the total context (`-c`), split
evenly per slot when `kv_unified` is false; `/health` answers 503 while loading, 200 when ready.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kneecap.errors import KneecapError

READY_PREFIX = "LISTENING "  # the one line the child prints on stdout once it listens
# llama.cpp's --cache-type-k/-v values (common/arg.cpp kv_cache_types)
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


@dataclass(frozen=True)
class LlamaCppServerConfig:
    """Flags of the launcher. `ctx_size` is total tokens (each of `parallel` slots gets ctx_size // parallel)."""

    model_path: str
    host: str = "127.0.0.1"
    port: int = 0  # 0 = let the server pick a free port
    parallel: int = 4
    ctx_size: int = 4096
    threads: int = 1
    cache_prompt: bool = True  # llama.cpp's default; clients may still send cache_prompt per request
    metrics: bool = True  # expose Prometheus /metrics
    cache_type: str = "f16"  # K and V cache type, as llama-server --cache-type-k/-v (f16 is llama.cpp's default)
    verbose: bool = (
        False  # log at verbosity 4, which includes llama.cpp's own lines (e.g. "llama_kv_cache: size = ...")
    )

    def __post_init__(self) -> None:
        if not self.model_path:
            raise KneecapError("no model path given", "pass --model PATH to a .gguf file")
        if not 0 <= self.port <= 65535:
            raise KneecapError(f"port {self.port} is out of range", "pass --port 0..65535 (0 = any free port)")
        for name in ("parallel", "ctx_size", "threads"):
            if getattr(self, name) < 1:
                raise KneecapError(
                    f"{name} must be >= 1, got {getattr(self, name)}", f"pass --{name.replace('_', '-')} N >= 1"
                )
        if self.cache_type not in CACHE_TYPES:
            raise KneecapError(
                f"cache type {self.cache_type!r} is not one llama.cpp accepts",
                f"pass --cache-type one of {', '.join(CACHE_TYPES)}",
            )
        if self.ctx_size < self.parallel:
            raise KneecapError(
                f"ctx-size {self.ctx_size} is smaller than parallel {self.parallel}",
                "each slot gets ctx-size / parallel tokens: raise --ctx-size",
            )

    def to_argv(self) -> list[str]:
        argv = [
            "--model",
            self.model_path,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--parallel",
            str(self.parallel),
            "--ctx-size",
            str(self.ctx_size),
            "--threads",
            str(self.threads),
        ]
        if not self.cache_prompt:
            argv.append("--no-cache-prompt")
        if not self.metrics:
            argv.append("--no-metrics")
        if self.cache_type != "f16":
            argv += ["--cache-type", self.cache_type]
        if self.verbose:
            argv.append("--verbose")
        return argv


@dataclass
class LlamaCppServer:
    """A running launcher subprocess. `stop()` ends it by PID (SIGTERM, then SIGKILL)."""

    base_url: str
    process: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """Terminate the server and return its exit code (None if it could not be reaped)."""
        if self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                try:
                    self.process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    return None
            except ProcessLookupError:
                pass
        return self.process.returncode

    def log_tail(self, num_chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-num_chars:]
        except OSError:
            return ""

    def __enter__(self) -> "LlamaCppServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _child_setup(cpu: int | None):
    """What the child does before exec: pin to `cpu`, and ask Linux to SIGTERM it if the process
    that started it dies (prctl PR_SET_PDEATHSIG = 1), so a crashed test run leaves no server."""

    def setup() -> None:  # pragma: no cover - runs in the child before exec
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
        except (OSError, AttributeError):
            pass

    return setup


def start_llamacpp_server(
    config: LlamaCppServerConfig, *, log_dir: str | Path, startup_timeout_s: float = 60.0, cpu: int | None = None
) -> LlamaCppServer:
    """Launch the server subprocess, wait until /health is 200, return its handle.

    Stdout and stderr go to files in `log_dir` (never a pipe, which a chatty server could fill).
    `cpu` pins the server to one core (os.sched_setaffinity in the child). On any failure the child is
    killed and a KneecapError carries the tail of its log.
    """
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    out_path, log_path = log_dir / "llamacpp.stdout", log_dir / "llamacpp.log"
    with open(out_path, "wb") as out, open(log_path, "wb") as err:
        process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *config.to_argv()],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            preexec_fn=_child_setup(cpu),
        )
    server = LlamaCppServer(base_url="", process=process, log_path=log_path)
    deadline = time.monotonic() + startup_timeout_s
    try:
        server.base_url = _wait_for_ready_line(server, out_path, deadline)
        _wait_for_health(server, deadline)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_for_ready_line(server: LlamaCppServer, out_path: Path, deadline: float) -> str:
    while time.monotonic() < deadline:
        for line in out_path.read_text(errors="replace").splitlines():
            if line.startswith(READY_PREFIX):
                return line[len(READY_PREFIX) :].strip()
        if not server.alive():
            raise KneecapError(
                f"llama.cpp server exited with code {server.process.returncode} before listening: "
                f"{server.log_tail(400)!r}",
                "check the model path and flags",
            )
        time.sleep(0.05)
    raise KneecapError("llama.cpp server did not start listening in time", f"see {server.log_path}")


def _wait_for_health(server: LlamaCppServer, deadline: float) -> None:
    last = "no answer"
    while time.monotonic() < deadline:
        if not server.alive():
            raise KneecapError(
                f"llama.cpp server exited with code {server.process.returncode} while loading", f"see {server.log_path}"
            )
        try:
            with urllib.request.urlopen(server.base_url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as exc:  # 503 while the model loads
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.05)
    raise KneecapError(
        f"llama.cpp server at {server.base_url} not healthy in time (last: {last})", f"see {server.log_path}"
    )


def _serve(config: LlamaCppServerConfig) -> int:  # pragma: no cover - runs in the child process
    import threading

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = config.model_path
    params.hostnames = [config.host]
    params.port = config.port
    params.n_parallel = config.parallel
    params.n_ctx = config.ctx_size
    params.kv_unified = False  # per-slot context = n_ctx / n_parallel, as with `llama-server -c C -np NP`
    params.cpuparams.n_threads = config.threads
    params.cpuparams_batch.n_threads = config.threads
    params.cache_prompt = config.cache_prompt
    params.endpoint_metrics = config.metrics
    params.endpoint_slots = True
    params.warmup = False
    cache_type = xllamacpp.ggml_type.__members__[f"GGML_TYPE_{config.cache_type.upper()}"]
    params.cache_type_k = cache_type
    params.cache_type_v = cache_type
    if config.verbose:
        params.verbosity = 4  # llama.cpp's info lines (model loader, KV cache size) show from 4 up

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        server = xllamacpp.Server(params)
    except RuntimeError as exc:
        print(f"error: llama.cpp server failed to start: {exc}", file=sys.stderr, flush=True)
        return 1
    print(READY_PREFIX + server.listening_address, flush=True)
    while not stop.wait(0.5):
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # llama.cpp's threads need no orderly teardown; the OS frees the KV cache


def parse_args(argv: list[str] | None = None) -> LlamaCppServerConfig:
    parser = argparse.ArgumentParser(
        prog="python tests/llamacpp/llamacpp_server.py", description="llama.cpp's HTTP server (xllamacpp) as a command"
    )
    parser.add_argument("--model", required=True, help="path to a .gguf file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port (printed on stdout)")
    parser.add_argument("--parallel", "-np", type=int, default=4, help="slots (concurrent sequences)")
    parser.add_argument("--ctx-size", "-c", type=int, default=4096, help="total context tokens, split over slots")
    parser.add_argument("--threads", "-t", type=int, default=1)
    parser.add_argument("--no-cache-prompt", action="store_true", help="server default cache_prompt=false")
    parser.add_argument("--no-metrics", action="store_true", help="do not expose /metrics")
    parser.add_argument("--cache-type", default="f16", choices=CACHE_TYPES, help="K and V cache type")
    parser.add_argument("--verbose", action="store_true", help="log llama.cpp's info lines (verbosity 4)")
    ns = parser.parse_args(argv)
    return LlamaCppServerConfig(
        model_path=ns.model,
        host=ns.host,
        port=ns.port,
        parallel=ns.parallel,
        ctx_size=ns.ctx_size,
        threads=ns.threads,
        cache_prompt=not ns.no_cache_prompt,
        metrics=not ns.no_metrics,
        cache_type=ns.cache_type,
        verbose=ns.verbose,
    )


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - exercised through the subprocess
    try:
        config = parse_args(argv)
        if not Path(config.model_path).is_file():
            raise KneecapError(f"model file {config.model_path} not found", "pass --model PATH to an existing .gguf")
    except KneecapError as exc:
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
    return _serve(config)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
