"""What `kneecap recommend` is asked (RecommendRequest: model, load, lengths, SLO, allowed GPUs and dtypes,
engine limits to try) and the grid of candidate deployments it spans (Knobs, one replica's setup).

Owns validation of the request and the deterministic order of the grid; not pricing, bounds or simulation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from kneecap.errors import KneecapError
from kneecap.metrics.slo import ERROR_RATE, split_key
from kneecap.model.kv import kv_dtype_bytes
from kneecap.model.weights import weight_bits
from kneecap.plan.build import DeploymentRequest
from kneecap.recommend.trace import TraceLoad
from kneecap.sim.fleet import ROUTERS
from kneecap.sim.speculative import SpecDecoding
from kneecap.workload import Workload

KINDS = ("rate", "concurrency")
GPUS_PER_NODE = 8  # one replica stays inside one node's NVLink domain (the catalog's interconnect is per node)
TP_CHOICES = (1, 2, 4, 8)
PP_CHOICES = (1, 2)
# vLLM V1's default max_num_seqs is 256, or 1024 on a GPU of >= 70 GiB (vllm/engine/arg_utils.py,
# _set_default_args); the search brackets them from 32 up
MAX_NUM_SEQS_CHOICES = (32, 64, 128, 256, 512, 1024)
# vLLM V1 defaults: 2048, 8192 (>= 70 GiB), 16384 (>= 160 GiB, 0.28 on); 32768 for prefill-heavy traffic
MAX_NUM_BATCHED_TOKENS_CHOICES = (2048, 4096, 8192, 16384, 32768)
# vLLM's --enable-prefix-caching / --no-enable-prefix-caching (on by default in V1); tried both ways for models
# without linear-attention state layers (whose KV layout, and so the plan, depends on it)
PREFIX_CACHING_CHOICES = (True, False)
DEFAULT_WEIGHT_DTYPES = ("bf16", "fp8")
DEFAULT_KV_DTYPES = ("bf16", "fp8")
ENGINE_DEFAULTS = "vllm"  # the simulated engine's scheduler and CPU profile


def slo_limits(slo: dict, metrics: tuple[str, ...], stats: tuple[str, ...] | None = None) -> dict:
    """The SLO's latency limits (ms) on these metrics (ttft, tpot, itl, e2e), of these stats when given."""
    return {
        k: v
        for k, v in slo.items()
        if k != ERROR_RATE and split_key(k)[0] in metrics and (stats is None or split_key(k)[1] in stats)
    }


class Knobs(NamedTuple):
    """One replica's deployment: the plan key (gpu, tp, pp, dtypes) and the engine's two batch limits."""

    gpu: str
    tp: int
    pp: int
    weight_dtype: str
    kv_dtype: str
    max_num_seqs: int
    max_num_batched_tokens: int
    ep: int = 1  # expert parallelism over the tp GPUs (MoE models; 1: experts split tensor-parallel)
    # attention data-parallel over the tp GPUs (MLA MoE models: SGLang --enable-dp-attention, vLLM DP+EP): each GPU
    # attends its own sequences with its own KV pool, experts expert-parallel over all tp GPUs (ep = tp).
    # max_num_seqs / max_num_batched_tokens are then the whole replica's (every DP rank's together), as the
    # simulated engine schedules them; each rank's engine flag is that / tp (confirm.serve_cmd)
    dp_attention: bool = False
    spec: int = 0  # draft tokens K of the request's speculative decoding (RecommendRequest.spec_for); 0: off
    prefix_caching: bool = True  # vLLM --enable-prefix-caching (the engine's default) or --no-enable-prefix-caching

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def plan_key(self) -> tuple:
        return (self.gpu, self.tp, self.pp, self.weight_dtype, self.kv_dtype, self.ep, self.dp_attention, self.spec)


@dataclass(frozen=True)
class RecommendRequest:
    """Lengths in tokens; load in requests/s (rate) or streams (concurrency); SLO limits in ms."""

    model: str
    kind: str
    load: float
    isl: int
    osl: int
    slo: dict
    gpus: tuple[str, ...]
    weight_dtypes: tuple[str, ...] = DEFAULT_WEIGHT_DTYPES
    kv_dtypes: tuple[str, ...] = DEFAULT_KV_DTYPES
    max_gpus: int | None = None  # total GPUs over all replicas
    tp_choices: tuple[int, ...] = TP_CHOICES
    pp_choices: tuple[int, ...] = PP_CHOICES
    max_num_seqs_choices: tuple[int, ...] = MAX_NUM_SEQS_CHOICES
    max_num_batched_tokens_choices: tuple[int, ...] = MAX_NUM_BATCHED_TOKENS_CHOICES
    prefix_caching_choices: tuple[bool, ...] = PREFIX_CACHING_CHOICES
    seed: int = 0
    burstiness: float = 1.0  # rate loads: gamma shape of the arrival gaps (1: Poisson, < 1 burstier)
    mix: Workload | None = None  # a class file's mix (isl / osl are then its weighted means)
    trace: TraceLoad | None = None  # --replay: the mix is the trace's (trace.workload) and the rate its mean x speed
    expert_parallel: bool = True  # MoE models: also try ep = tp (experts split over the TP GPUs) beside ep = 1
    dp_attention: bool = True  # MLA MoE models: also try DP attention (ep = tp) for every tp > 1
    # speculative decoding (--spec-method/--spec-tokens/--spec-acceptance): every candidate is also tried with it,
    # its acceptance an assumption the answer states; None: never tried
    spec: SpecDecoding | None = None
    # the router in front of the replicas (kneecap.sim.fleet): with another router than round-robin, or a shared
    # prefix, the sizing check at the stated load runs the replicas through it at the whole load
    router: str = "round-robin"
    shared_prefix_tokens: int = 0  # --shared-prefix TOKENSxGROUPS: each prompt starts with one of GROUPS prefixes
    num_prefix_groups: int = 1

    @property
    def spec_token_choices(self) -> tuple[int, ...]:
        """Draft tokens tried: 1 up to the K given when the acceptance is rates (a rate per position holds for
        fewer drafts too; more drafts pay off less as the batch grows), only K for measured accepted lengths."""
        if self.spec is None:
            return ()
        if self.spec.accepted_lengths:
            return (self.spec.tokens,)
        return tuple(range(1, self.spec.tokens + 1))

    def spec_for(self, tokens: int) -> SpecDecoding | None:
        """The request's speculative decoding with `tokens` draft tokens (None: 0, or none given)."""
        return self.spec.with_tokens(tokens) if tokens and self.spec is not None else None

    @property
    def fleet_check(self) -> bool:
        """The sizing check simulates the fleet behind the router (else one replica at its even share)."""
        return self.router != "round-robin" or self.shared_prefix_tokens > 0

    @property
    def arrivals(self) -> str:
        """The arrival pattern the simulated levels assume, in words."""
        if self.kind != "rate":
            return f"closed loop: {int(self.load)} streams, each sending its next request when the last one ends"
        split = (
            f"sent to the replicas by a {self.router} router"
            if self.fleet_check
            else "split at random over the replicas"
        )
        if self.burstiness == 1.0:
            return f"Poisson arrivals (exponential gaps, burstiness 1), {split}"
        return (
            f"gamma-distributed arrival gaps of shape {self.burstiness:g} ("
            + ("burstier" if self.burstiness < 1 else "more regular")
            + f" than Poisson), {split}"
        )

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise KneecapError(
                f"load kind must be rate or concurrency, got {self.kind!r}", "pass --rate R or --concurrency C"
            )
        if not self.load > 0 or (self.kind == "concurrency" and int(self.load) != self.load):
            what = (
                "a positive whole number of streams" if self.kind == "concurrency" else "a positive rate in requests/s"
            )
            raise KneecapError(f"--{self.kind} must be {what}, got {self.load!r}", f"pass e.g. --{self.kind} 16")
        for flag, v in (("--isl", self.isl), ("--osl", self.osl)):
            if not isinstance(v, int) or v < 1:
                raise KneecapError(f"{flag} must be a whole number >= 1, got {v!r}", f"pass e.g. {flag} 1000")
        if self.router not in ROUTERS:
            raise KneecapError(f"unknown --router {self.router!r}", f"pass one of {', '.join(ROUTERS)}")
        if self.shared_prefix_tokens and self.mix is not None:
            raise KneecapError(
                "--shared-prefix and --classes/--replay both given",
                "state shared prefixes in the class file (shared_prefix_tokens, num_prefix_groups)",
            )
        if self.shared_prefix_tokens and self.shared_prefix_tokens >= self.isl:
            raise KneecapError(
                f"--shared-prefix {self.shared_prefix_tokens} tokens is not shorter than --isl {self.isl}",
                "use a prefix shorter than the prompt",
            )
        if not self.burstiness > 0:
            raise KneecapError(
                f"--burstiness must be > 0, got {self.burstiness!r}",
                "pass e.g. --burstiness 1 (Poisson arrivals) or 0.5 (burstier)",
            )
        if self.trace is not None and self.kind != "rate":
            raise KneecapError("a replayed trace sets the rate, not a concurrency", "drop --concurrency")
        latency = [k for k in self.slo if k != ERROR_RATE]
        if not latency:
            raise KneecapError(
                "recommend needs a latency SLO to size against", "pass e.g. --slo ttft_p99_ms=2000,tpot_p99_ms=50"
            )
        if not self.gpus:
            raise KneecapError(
                "no candidate GPU has a price",
                "pass --gpus with priced GPUs, or --prices FILE giving dollars per GPU-hour",
            )
        if self.max_gpus is not None and self.max_gpus < 1:
            raise KneecapError(f"--max-gpus must be >= 1, got {self.max_gpus}", "pass e.g. --max-gpus 16")
        for d in self.weight_dtypes:
            weight_bits(d)
        for d in self.kv_dtypes:
            kv_dtype_bytes(d)
        if not self.weight_dtypes or not self.kv_dtypes:
            raise KneecapError("empty dtype list", "pass e.g. --weight-dtypes bf16,fp8 --kv-dtypes bf16,fp8")

    @property
    def context(self) -> int:
        if self.mix is not None:
            return max(c.input.upper_bound + c.output.upper_bound for c in self.mix.classes)
        return self.isl + self.osl

    def deployment_request(self, k: Knobs) -> DeploymentRequest:
        """The one deployment builder's request for a candidate (every other default as `kneecap plan`)."""
        return DeploymentRequest(
            model=self.model,
            gpu=k.gpu,
            tp=k.tp,
            pp=k.pp,
            ep=k.ep,
            dp_attention=k.dp_attention,
            weight_dtype=k.weight_dtype,
            kv_dtype=k.kv_dtype,
            context=self.context,
        )

    @property
    def is_moe(self) -> bool:
        from kneecap.model import load_model

        m = load_model(self.model)
        return m.active_params < m.total_params

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention in any layer (DeepSeek V3, Kimi K2): one latent KV head, which TP replicates
        on every GPU; DP attention keeps it once per sequence instead."""
        from kneecap.model import load_model

        return "mla" in load_model(self.model).layer_types

    @property
    def has_state_layers(self) -> bool:
        """Linear-attention (state) layers: their KV layout depends on prefix caching, so it stays the default."""
        from kneecap.model import load_model

        return "linear_attention" in load_model(self.model).layer_types

    def _parallel(self, tp: int) -> list[tuple[int, bool]]:
        """(ep, dp_attention) pairs tried at this tp: MoE models with expert_parallel also ep = tp (vLLM
        --enable-expert-parallel: EP size = TP x DP); MLA MoE models with dp_attention also DP attention."""
        out = [(1, False)]
        if tp > 1 and self.expert_parallel and self.is_moe:
            out.append((tp, False))
        if tp > 1 and self.dp_attention and self.is_moe and self.is_mla:
            out.append((tp, True))
        return out

    def grid(self) -> list[Knobs]:
        """Every candidate, in a fixed order (GPU list order, then tp, ep / DP attention (_parallel), pp, dtypes,
        limits, prefix caching on / off, then speculation off / on when the request gives one). Under DP attention each engine limit is per DP
        rank, so the replica's are tp times the choice."""
        out = []
        specs = (0, *self.spec_token_choices) if self.spec is not None else (0,)
        caching = (True,) if self.has_state_layers else self.prefix_caching_choices
        for gpu in self.gpus:
            for tp in self.tp_choices:
                for ep, dpa in self._parallel(tp):
                    ranks = tp if dpa else 1
                    for pp in self.pp_choices:
                        if tp * pp > GPUS_PER_NODE or (self.max_gpus is not None and tp * pp > self.max_gpus):
                            continue
                        for wd in self.weight_dtypes:
                            for kd in self.kv_dtypes:
                                for mns in self.max_num_seqs_choices:
                                    for mbt in self.max_num_batched_tokens_choices:
                                        for pc in caching:
                                            for spec in specs:
                                                out.append(
                                                    Knobs(
                                                        gpu,
                                                        tp,
                                                        pp,
                                                        wd,
                                                        kd,
                                                        mns * ranks,
                                                        mbt * ranks,
                                                        ep,
                                                        dpa,
                                                        spec,
                                                        pc,
                                                    )
                                                )
        return out
