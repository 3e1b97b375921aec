"""BenchOptions: every `kneecap bench` flag as one validated, frozen value (no secrets inside).

Owns flag validation and the per-level request budget; knows nothing of sockets or files.
The API key is deliberately not a field: it is resolved separately (kneecap.sweep.credentials)
so that options can be written to manifest.json and reloaded by `--resume` without leaking it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from kneecap.errors import KneecapError
from kneecap.workload.endpoints import COMPLETIONS, check_endpoint
from kneecap.workload.level_work import KIND_CONCURRENCY, KIND_RATE
from kneecap.workload.slices import check_until_stable
from kneecap.workload.sweep_spec import SweepSpec

FAIL_ON = ("errors", "slo", "stopped")

# Default requests per level when neither --requests nor --duration is given:
# closed loop: DEFAULT_REQUESTS_PER_STREAM per concurrent stream (so every stream sends several
# requests and the steady state dominates the ramp), open loop: DEFAULT_OPEN_LOOP_S of arrivals.
DEFAULT_REQUESTS_PER_STREAM = 4
DEFAULT_OPEN_LOOP_S = 30.0
MIN_REQUESTS_PER_LEVEL = 10
# Closed loop with --duration runs in rounds of ROUND_REQUESTS_PER_STREAM requests per stream
# (bodies are prepared before a round's clock starts, so a round bounds the memory they take);
# rounds follow each other until the duration is over. A round boundary lets every stream finish
# its last request before the next round starts: the load dips for about one request's time
# once per round, i.e. for at most 1/ROUND_REQUESTS_PER_STREAM of the level.
ROUND_REQUESTS_PER_STREAM = 32
MAX_REQUESTS_PER_ROUND = 20_000
STABLE_ROUND_REQUESTS_PER_STREAM = 4  # --until-stable: shorter rounds, the p99s checked after each


def parse_fail_on(spec: str) -> tuple[str, ...]:
    """Parse '--fail-on errors,slo' into a tuple of conditions."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    bad = [p for p in parts if p not in FAIL_ON]
    if bad:
        raise KneecapError(f"--fail-on got unknown condition(s) {', '.join(bad)}", f"use any of {', '.join(FAIL_ON)}")
    return tuple(dict.fromkeys(parts))


def parse_shared_prefix(spec: str | None) -> tuple[int, int]:
    """'512' or '512x8' -> (prefix tokens, number of prefix groups)."""
    if not spec:
        return 0, 1
    tokens, _, groups = spec.lower().partition("x")
    try:
        num_tokens, num_groups = int(tokens), int(groups or 1)
    except ValueError:
        raise KneecapError(
            f"--shared-prefix {spec!r} is not TOKENS or TOKENSxGROUPS",
            "pass e.g. --shared-prefix 512x8 (8 groups sharing a 512-token prefix)",
        ) from None
    if num_tokens < 1 or num_groups < 1:
        raise KneecapError(
            f"--shared-prefix needs tokens >= 1 and groups >= 1, got {spec!r}", "pass e.g. --shared-prefix 512x8"
        )
    return num_tokens, num_groups


@dataclass(frozen=True, kw_only=True)
class BenchOptions(SweepSpec):
    """One bench run: the shared SweepSpec (osl None only where the data sizes the outputs, isl required for the
    random dataset) and what only the HTTP client reads."""

    base_url: str
    concurrency: tuple[int, ...] = ()
    rate: tuple[float, ...] = ()
    model: str | None = None
    endpoint: str = COMPLETIONS
    slo: str | None = None  # raw `--slo` text, parsed by kneecap.metrics.slo
    timeout_s: float = 600.0  # per request
    keepalive: bool | None = None  # None: probe the server (kneecap.client.keepalive) and decide
    ignore_eos: bool = True
    dataset: str = "random"
    prompt_salt: str | None = None  # mixed into every prompt; None: a fresh one per run (recorded, kept by --resume)
    tokenizer: str | None = None  # a local tokenizer.json to calibrate text prompts with
    kv_tokens: int | None = None  # KV pool capacity override for the preflight
    block_size: int | None = None  # tokens per KV block for the preflight (None: the server's, else 16)
    force: bool = False  # run levels the preflight says exceed the KV pool
    workers: int = 1
    keep_prompts: bool = False
    reset_prefix_cache: bool = False  # --reset-prefix-cache: ask the server to drop its prefix cache before each level
    redact: bool = False
    fail_on: tuple[str, ...] = ()
    api_key_env: str | None = None  # name of the env variable holding the key (never the key)
    api_key_file: str | None = None  # path of a file holding the key (never the key)
    # the workload beyond fixed lengths (kneecap.sweep.bench_workload builds each level's requests from these)
    replay: str | None = None  # --replay PATH: a Mooncake JSONL or BurstGPT CSV trace, requests at its times
    replay_speeds: tuple[float, ...] = ()  # --replay-speed, one level each; `rate` then holds speed x trace_rate
    trace_rate: float | None = None  # the replayed trace's mean request rate at speed 1 (requests/s)
    replay_requests: int | None = None  # the replayed trace's rows (after --skip-too-long)
    skip_too_long: bool = False  # --skip-too-long: drop trace or dataset rows longer than the server's context
    ramp: str | None = None  # --ramp KIND:START:END:SECONDS on the dimension of --concurrency / --rate

    def __post_init__(self) -> None:
        from kneecap.client.server_info import check_server_url

        check_server_url(self.base_url, "--base-url")
        if bool(self.concurrency) == bool(self.rate):
            raise KneecapError(
                "pass exactly one of --concurrency and --rate",
                "e.g. --concurrency 1,8,64 (closed loop) or --rate 1,2,4 (open loop, requests/s)",
            )
        check_endpoint(self.endpoint)
        lengths_from_data = self.replay is not None or self.dataset != "random"
        if self.osl is None and not lengths_from_data:
            raise KneecapError(f"--osl must be a whole number >= 1, got {self.osl!r}", "pass e.g. --osl 1000")
        if self.replay is None and self.dataset == "random" and (self.isl is None or self.isl < 1):
            raise KneecapError(
                f"--isl must be a whole number >= 1 with the random dataset, got {self.isl!r}", "pass e.g. --isl 1000"
            )
        self.check()
        if self.timeout_s is not None and not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise KneecapError(
                f"--timeout must be a finite number > 0, got {self.timeout_s!r}", "pass a positive --timeout"
            )
        if self.prompt_salt is not None and (
            not self.prompt_salt or len(self.prompt_salt) > 64 or not self.prompt_salt.isprintable()
        ):
            raise KneecapError(
                f"--prompt-salt must be 1-64 printable characters, got {self.prompt_salt!r}",
                "pass the salt a results folder's manifest.json records, e.g. --prompt-salt 3f9a01c2",
            )
        if self.kv_tokens is not None and self.kv_tokens < 1:
            raise KneecapError(
                f"--kv-tokens must be >= 1, got {self.kv_tokens}",
                "pass the KV pool size in tokens, e.g. --kv-tokens 1573854",
            )
        if self.block_size is not None and self.block_size < 1:
            raise KneecapError(f"--block-size must be >= 1, got {self.block_size}", "pass e.g. --block-size 16")
        if not (1 <= self.workers <= 256):
            raise KneecapError(
                f"--workers must be between 1 and 256, got {self.workers}", "pass e.g. --workers 2 (one per spare core)"
            )
        if self.api_key_env is not None and self.api_key_file is not None:
            raise KneecapError("pass at most one of --api-key-env and --api-key-file", "drop one of them")
        self._check_workload()

    def _check_workload(self) -> None:
        """The workload flags that exclude each other, each refusal one line naming the fix."""
        special = [
            flag
            for flag, on in (
                ("--replay", self.replay is not None),
                ("--ramp", self.ramp is not None),
                ("--turns", bool(self.turns)),
            )
            if on
        ]
        if len(special) > 1:
            raise KneecapError(f"{' and '.join(special)} both given", "pass one of them per run")
        if self.replay is not None:
            if not self.rate or len(self.rate) != len(self.replay_speeds) or not self.trace_rate:
                raise KneecapError(
                    "--replay levels are replay speeds",
                    "pass --replay PATH [--replay-speed 1,2,4] without --concurrency or --rate",
                )
            if self.dataset != "random" or self.duration_s is not None or self.requests is not None:
                raise KneecapError(
                    "--replay sends the trace's own requests, each level the whole trace",
                    "drop --dataset, --requests and --duration",
                )
        if self.ramp is not None:
            from kneecap.workload.ramps import parse_ramp

            parse_ramp(self.ramp)
            if len(self.levels) != 1 or self.duration_s is not None or self.requests is not None:
                raise KneecapError(
                    "--ramp is one level whose load moves from START to END over SECONDS",
                    "drop --requests and --duration (the ramp's SECONDS is the level's length)",
                )
        if self.turns:
            if self.kind != KIND_CONCURRENCY or self.duration_s is not None or self.dataset != "random":
                raise KneecapError(
                    "--turns runs C users' conversations in closed loop for a number of requests",
                    "pass --concurrency C --requests N (N a multiple of --turns), without "
                    "--rate, --duration or --dataset",
                )
            for value in self.concurrency:
                n = self.requests_for(value)
                if n % self.turns or (self.warmup and self.warmup % self.turns):
                    raise KneecapError(
                        f"--requests {n} (or --warmup {self.warmup}) at C={value} is not a whole "
                        f"number of {self.turns}-turn conversations",
                        f"--requests counts turns: pass a multiple of {self.turns}",
                    )
        check_until_stable(
            self.until_stable,
            self.stable_window_s,
            closed_duration=self.in_rounds and not special,
            without="--requests, --replay, --ramp or --turns",
        )

    # -- the sweep ---------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """'concurrency' (closed loop) or 'rate' (open loop): the summary's level key."""
        return KIND_CONCURRENCY if self.concurrency else KIND_RATE

    @property
    def levels(self) -> tuple:
        return self.concurrency if self.concurrency else self.rate

    @property
    def base_url_clean(self) -> str:
        return self.base_url.rstrip("/")

    def requests_for(self, value: float) -> int:
        """Measured requests at one level (warmup not included); with --duration in closed loop,
        the requests of one round (rounds repeat until the duration is over).

        Open loop with --duration schedules ceil(rate x duration) arrivals.
        """
        if self.replay is not None:
            return max(1, (self.replay_requests or 0) - self.warmup)
        if self.ramp is not None:
            from kneecap.workload.ramps import parse_ramp, ramp_arrival_times

            ramp = parse_ramp(self.ramp)
            if self.kind == KIND_CONCURRENCY:  # users keep sending until the ramp's time is over: a generous cap
                return min(
                    MAX_REQUESTS_PER_ROUND,
                    max(MIN_REQUESTS_PER_LEVEL, int(ramp.duration_s * max(ramp.start, ramp.end) * 4)),
                )
            return len(ramp_arrival_times(ramp, seed=self.seed))
        if self.requests is not None:
            return self.requests
        if self.turns:
            return (
                max(MIN_REQUESTS_PER_LEVEL, DEFAULT_REQUESTS_PER_STREAM * int(value)) // self.turns * self.turns
                or self.turns
            )
        if self.kind == KIND_CONCURRENCY:
            if self.duration_s is not None:
                per_stream = STABLE_ROUND_REQUESTS_PER_STREAM if self.until_stable else ROUND_REQUESTS_PER_STREAM
                return min(MAX_REQUESTS_PER_ROUND, max(MIN_REQUESTS_PER_LEVEL, int(value) * per_stream))
            return max(MIN_REQUESTS_PER_LEVEL, DEFAULT_REQUESTS_PER_STREAM * int(value))
        if math.isinf(value):  # everything at once: there is no duration to fill
            return MIN_REQUESTS_PER_LEVEL
        span_s = self.duration_s if self.duration_s is not None else DEFAULT_OPEN_LOOP_S
        return max(MIN_REQUESTS_PER_LEVEL if self.duration_s is None else 1, math.ceil(value * span_s))

    @property
    def in_rounds(self) -> bool:
        """Closed loop for a duration: the level repeats rounds of requests until time is up."""
        return self.kind == KIND_CONCURRENCY and self.duration_s is not None and self.requests is None

    def level_label(self, value: float) -> str:
        if self.ramp is not None:
            kind, start, end, seconds = self.ramp.split(":")
            unit = "" if self.kind == KIND_CONCURRENCY else "/s"
            return f"ramp {self.kind} {kind} {start} to {end}{unit} over {seconds} s"
        if self.replay is not None and self.trace_rate:
            return f"replay x{value / self.trace_rate:g}"
        if self.kind == KIND_CONCURRENCY:
            return f"C={int(value)}"
        return "rate=inf" if math.isinf(value) else f"rate={value:g}/s"

    # -- persistence (manifest.json; never holds the key) ------------------------------------
    def to_dict(self) -> dict:
        """For manifest.json (tuples become JSON lists there); an infinite rate as "inf"."""
        return asdict(self) | {"rate": [r if math.isfinite(r) else "inf" for r in self.rate]}

    @classmethod
    def from_dict(cls, data: dict, **overrides) -> "BenchOptions":
        """Rebuild from manifest.json; `overrides` (flags given again) win over stored values."""
        known = {f.name for f in fields(cls)}
        merged = {k: v for k, v in data.items() if k in known}
        merged.update({k: v for k, v in overrides.items() if k in known and v is not None})
        merged["concurrency"] = tuple(int(c) for c in merged.get("concurrency") or ())
        merged["rate"] = tuple(float(r) for r in merged.get("rate") or ())
        merged["fail_on"] = tuple(merged.get("fail_on") or ())
        merged["replay_speeds"] = tuple(float(r) for r in merged.get("replay_speeds") or ())
        if "base_url" not in merged or "osl" not in merged:
            raise KneecapError(
                "the results folder's manifest.json has no bench options to resume from",
                "resume only a folder written by `kneecap bench`, or start a new run",
            )
        return cls(**merged)
