"""The server's own gauges during a level: scrape Prometheus /metrics text, pick the engine's KV-cache
usage, running and waiting requests and preemptions, and reduce a level's samples to maxima/deltas.

Owns: a small parser for the Prometheus text exposition format (v0.0.4; no new dependency), the
metric names of vLLM, SGLang and llama.cpp, and `MetricsPoller` (an asyncio task sampling every
interval). Does not decide anything from the numbers (metrics / stop rules do).
Metric names, from the engines' sources:
  vLLM   vllm/v1/metrics/loggers.py: vllm:kv_cache_usage_perc (V1; a 0-1 fraction despite the name),
         vllm:gpu_cache_usage_perc (V0 / deprecated alias), vllm:num_requests_running,
         vllm:num_requests_waiting, vllm:num_preemptions_total (counter), vllm:prefix_cache_queries_total
         and vllm:prefix_cache_hits_total (counters, in prompt tokens looked up / found cached; read
         from vLLM 0.32.0's /metrics, kneecap's tests/vllm); a level's prefix_cache_hit_rate is
         Δhits / Δqueries over the level
  SGLang python/sglang/srt/metrics/collector.py: sglang:token_usage (0-1), sglang:num_running_reqs,
         sglang:num_queue_reqs; prefix cache: sglang:cached_tokens_total (counter, summed over its
         cache_source label) over sglang:prompt_tokens_total (SGLang docs, "Production Metrics",
         request metrics table; both count a request's tokens when it finishes)
  llama.cpp tools/server (README "GET /metrics", needs --metrics): llamacpp:kv_cache_usage_ratio
         (0-1; dropped by newer builds), llamacpp:requests_processing, llamacpp:requests_deferred
Speculative decoding, where the server runs it:
  vLLM   vllm/v1/spec_decode/metrics.py (SpecDecodingProm, 0.32.0): counters vllm:spec_decode_num_drafts_total,
         vllm:spec_decode_num_draft_tokens_total, vllm:spec_decode_num_accepted_tokens_total; over a level,
         acceptance rate = Δaccepted / Δdraft tokens and mean accepted length = 1 + Δaccepted / Δdrafts (the
         bonus token included), the formulas that module's docstring gives
  SGLang python/sglang/srt/metrics/collector.py: gauges sglang:spec_accept_length and sglang:spec_accept_rate,
         averaged over the level's scrapes (SGLang publishes no draft counters)
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Iterable

from kneecap.client.tasks import cancel_and_wait

# role -> names, first found wins within an engine; engines are tried in this order
ENGINE_METRICS = {
    "vllm": {
        "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
        "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
        "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
        "spec_accepted": ("vllm:spec_decode_num_accepted_tokens_total",),
    },
    "sglang": {
        "kv_usage": ("sglang:token_usage",),
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "preemptions": (),
        "prefix_hits": ("sglang:cached_tokens_total",),
        "prefix_queries": ("sglang:prompt_tokens_total",),
        "spec_accept_length": ("sglang:spec_accept_length",),
        "spec_accept_rate": ("sglang:spec_accept_rate",),
    },
    "llama.cpp": {
        "kv_usage": ("llamacpp:kv_cache_usage_ratio",),
        "running": ("llamacpp:requests_processing",),
        "waiting": ("llamacpp:requests_deferred",),
        "preemptions": (),
    },
}
ALL_NAMES = tuple(sorted({n for roles in ENGINE_METRICS.values() for names in roles.values() for n in names}))


class PrometheusParseError(ValueError):
    """A sample line the exposition format does not allow."""


def _parse_labels(text: str, start: int) -> tuple[dict[str, str], int]:
    """Labels from text[start] == '{' to the matching '}'; returns (labels, index after '}')."""
    labels: dict[str, str] = {}
    i = start + 1
    n = len(text)
    while True:
        while i < n and text[i] in " ,":
            i += 1
        if i >= n:
            raise PrometheusParseError("unterminated label set")
        if text[i] == "}":
            return labels, i + 1
        eq = text.find("=", i)
        if eq < 0 or eq + 1 >= n or text[eq + 1] != '"':
            raise PrometheusParseError("label without a quoted value")
        name = text[i:eq].strip()
        i = eq + 2
        out = []
        while True:
            if i >= n:
                raise PrometheusParseError("unterminated label value")
            c = text[i]
            if c == "\\" and i + 1 < n:
                nxt = text[i + 1]
                out.append("\n" if nxt == "n" else nxt)
                i += 2
                continue
            if c == '"':
                i += 1
                break
            out.append(c)
            i += 1
        labels[name] = "".join(out)


def _parse_value(token: str) -> float:
    try:
        return float(token)  # also "+Inf", "-Inf" and "NaN", as the exposition format writes them
    except ValueError:
        raise PrometheusParseError(f"bad sample value {token[:40]!r}") from None


def parse_prometheus(text: str, names: Iterable[str] | None = None) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by metric name: {name: [(labels, value), ...]}. Comments and malformed lines are skipped.

    With `names`, only those metrics are parsed (a C-level prefix test drops the rest cheaply, so
    scraping vLLM's ~100 KiB of histograms costs little on the client's event loop).
    """
    wanted = tuple(names) if names is not None else None
    wanted_set = set(wanted) if wanted is not None else None
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        if wanted is not None and not line.startswith(wanted):
            continue
        try:
            brace = line.find("{")
            space = line.find(" ")
            if brace >= 0 and (space < 0 or brace < space):
                name = line[:brace]
                labels, end = _parse_labels(line, brace)
                rest = line[end:].split()
            else:
                parts = line.split()
                name, labels, rest = parts[0], {}, parts[1:]
            if not rest:
                raise PrometheusParseError("sample without a value")
            value = _parse_value(rest[0])
        except PrometheusParseError:
            continue
        name = name.strip()
        if wanted_set is not None and name not in wanted_set:
            continue
        out.setdefault(name, []).append((labels, value))
    return out


@dataclass(frozen=True)
class MetricsSample:
    """One scrape: KV usage as a 0-1 fraction (max over engines), requests summed over engines."""

    at_s: float  # when scraped (caller's clock)
    engine: str | None
    kv_usage: float | None
    running: float | None
    waiting: float | None
    preemptions_total: float | None
    prefix_hits_total: float | None = None  # prompt tokens found in the prefix cache (counter)
    prefix_queries_total: float | None = None  # prompt tokens looked up in it (counter)
    spec_drafts_total: float | None = None  # speculative decoding (vLLM counters): drafts proposed
    spec_draft_tokens_total: float | None = None  # ... draft tokens proposed
    spec_accepted_total: float | None = None  # ... draft tokens accepted
    spec_accept_length: float | None = None  # SGLang gauges: mean accepted length, acceptance rate
    spec_accept_rate: float | None = None


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _pick(samples: dict, names: tuple[str, ...], reduce) -> float | None:
    for name in names:
        values = [v for _, v in samples.get(name, ()) if not math.isnan(v)]
        if values:
            return reduce(values)
    return None


def sample_from_text(text: str, at_s: float = 0.0) -> MetricsSample:
    """Read the engine gauges out of one /metrics body (the first engine whose names appear)."""
    samples = parse_prometheus(text, ALL_NAMES)
    for engine, roles in ENGINE_METRICS.items():
        if any(n in samples for names in roles.values() for n in names):
            return MetricsSample(
                at_s,
                engine,
                _pick(samples, roles["kv_usage"], max),
                _pick(samples, roles["running"], sum),
                _pick(samples, roles["waiting"], sum),
                _pick(samples, roles["preemptions"], sum),
                _pick(samples, roles.get("prefix_hits", ()), sum),
                _pick(samples, roles.get("prefix_queries", ()), sum),
                _pick(samples, roles.get("spec_drafts", ()), sum),
                _pick(samples, roles.get("spec_draft_tokens", ()), sum),
                _pick(samples, roles.get("spec_accepted", ()), sum),
                _pick(samples, roles.get("spec_accept_length", ()), _mean),
                _pick(samples, roles.get("spec_accept_rate", ()), _mean),
            )
    return MetricsSample(at_s, None, None, None, None, None)


@dataclass
class LevelServerMetrics:
    """A level's server-side view: maxima of gauges, increase of the preemption counter."""

    engine: str | None = None
    kv_usage_max: float | None = None
    running_max: float | None = None
    waiting_max: float | None = None
    preemptions_delta: float | None = None
    num_samples: int = 0
    num_failed_scrapes: int = 0
    samples: list[MetricsSample] = field(default_factory=list, repr=False)
    prefix_cache_hits_delta: float | None = None
    prefix_cache_queries_delta: float | None = None
    spec_drafts_delta: float | None = None
    spec_draft_tokens_delta: float | None = None
    spec_accepted_delta: float | None = None
    spec_accept_length_mean: float | None = None
    spec_accept_rate_mean: float | None = None

    @property
    def spec(self) -> dict | None:
        """The level's speculative decoding as the server counted it: {draft_tokens, accepted_tokens,
        acceptance_rate, mean_accepted_length, source}; None where the server reports none (not running it)."""
        if self.spec_draft_tokens_delta:
            accepted = self.spec_accepted_delta or 0.0
            return {
                "draft_tokens": int(self.spec_draft_tokens_delta),
                "accepted_tokens": int(accepted),
                "acceptance_rate": round(accepted / self.spec_draft_tokens_delta, 6),
                "mean_accepted_length": (
                    round(1.0 + accepted / self.spec_drafts_delta, 6) if self.spec_drafts_delta else None
                ),
                "source": f"{self.engine or 'server'} /metrics counters",
            }
        if self.spec_accept_length_mean is not None:
            return {
                "draft_tokens": None,
                "accepted_tokens": None,
                "acceptance_rate": (
                    None if self.spec_accept_rate_mean is None else round(self.spec_accept_rate_mean, 6)
                ),
                "mean_accepted_length": round(self.spec_accept_length_mean, 6),
                "source": f"{self.engine or 'server'} /metrics gauges (mean over the level's scrapes)",
            }
        return None

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Share of the level's looked-up prompt tokens the server found cached (None: not reported or no lookups)."""
        if not self.prefix_cache_queries_delta or self.prefix_cache_hits_delta is None:
            return None
        return self.prefix_cache_hits_delta / self.prefix_cache_queries_delta

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "kv_usage_max": self.kv_usage_max,
            "running_max": self.running_max,
            "waiting_max": self.waiting_max,
            "preemptions_delta": self.preemptions_delta,
            "prefix_cache_hits_delta": self.prefix_cache_hits_delta,
            "prefix_cache_queries_delta": self.prefix_cache_queries_delta,
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
            "spec": self.spec,
            "num_samples": self.num_samples,
            "num_failed_scrapes": self.num_failed_scrapes,
        }


def summarize_samples(samples: list[MetricsSample], num_failed: int = 0) -> LevelServerMetrics:
    def mx(attr: str) -> float | None:
        values = [getattr(s, attr) for s in samples if getattr(s, attr) is not None]
        return max(values) if values else None

    def delta(attr: str) -> float | None:
        values = [getattr(s, attr) for s in samples if getattr(s, attr) is not None]
        return (values[-1] - values[0]) if len(values) >= 2 else None

    def mean(attr: str) -> float | None:
        values = [getattr(s, attr) for s in samples if getattr(s, attr) is not None]
        return _mean(values) if values else None

    engine = next((s.engine for s in samples if s.engine), None)
    return LevelServerMetrics(
        engine=engine,
        kv_usage_max=mx("kv_usage"),
        running_max=mx("running"),
        waiting_max=mx("waiting"),
        preemptions_delta=delta("preemptions_total"),
        num_samples=len(samples),
        num_failed_scrapes=num_failed,
        samples=list(samples),
        prefix_cache_hits_delta=delta("prefix_hits_total"),
        prefix_cache_queries_delta=delta("prefix_queries_total"),
        spec_drafts_delta=delta("spec_drafts_total"),
        spec_draft_tokens_delta=delta("spec_draft_tokens_total"),
        spec_accepted_delta=delta("spec_accepted_total"),
        spec_accept_length_mean=mean("spec_accept_length"),
        spec_accept_rate_mean=mean("spec_accept_rate"),
    )


class MetricsPoller:
    """Samples GET {base_url}/metrics every interval_s while a level runs.

        poller = MetricsPoller(base_url, 1.0)
        poller.start()            # takes a first sample right away
        ... run the level ...
        level_metrics = await poller.stop()   # takes a last sample, returns the summary

    A server without /metrics gives a summary of Nones (num_failed_scrapes counts the misses);
    scraping never raises into the level.
    """

    def __init__(self, base_url: str, interval_s: float = 1.0, *, api_key: str | None = None, timeout_s: float = 2.0):
        self.url = base_url.rstrip("/").removesuffix("/v1") + "/metrics"
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session = None  # its own, opened at the first scrape
        self._task: asyncio.Task | None = None
        self.samples: list[MetricsSample] = []
        self.failed = 0

    async def scrape(self) -> MetricsSample | None:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=2))
        try:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            async with self._session.get(self.url, headers=self._headers, timeout=timeout) as resp:
                if resp.status != 200:
                    self.failed += 1
                    return None
                text = await resp.text(errors="replace")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            self.failed += 1
            return None
        sample = sample_from_text(text, time.perf_counter())
        self.samples.append(sample)
        return sample

    async def _loop(self) -> None:
        while True:
            await self.scrape()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> LevelServerMetrics:
        await cancel_and_wait(self._task)
        self._task = None
        await self.scrape()
        if self._session is not None:
            await self._session.close()
            self._session = None
        return summarize_samples(self.samples, self.failed)
