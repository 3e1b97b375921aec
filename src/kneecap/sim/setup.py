"""SimDeployment: the one simulated deployment (a Plan, the engine's scheduler config, the step-time model) used
by `simulate`, `serve`, load-plan simulator candidates, `calibrate` and validation: the pool is exactly
plan.num_kv_blocks, the scheduler defaults the named engine's. Not flag parsing (cli/), the ledger
(kneecap.plan.build) nor the clock (sweep.py, serve/).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace

from kneecap.errors import KneecapError
from kneecap.model.kv import stage_layer_types
from kneecap.plan.build import DEFAULTS, DeploymentRequest, plan_deployment
from kneecap.plan.ledger import Plan
from kneecap.sim.config import (
    TRTLLM_KV_FREE_GPU_MEM_FRACTION,
    EngineConfig,
    at_release,
    chat_frontend_ms,
    chat_frontend_ms_per_prompt_token,
    dp_rank_tokens,
    engine_defaults,
    release_number,
    trtllm_bench_limits,
    under_dp_attention,
)
from kneecap.sim.engine import Engine, state_blocks_per_sequence
from kneecap.sim.steptime import StepTimeModel, StepTimeParams
from kneecap.workload.endpoints import COMPLETIONS, check_endpoint


@dataclass(frozen=True)
class SimDeployment:
    """Everything an Engine needs, derived from one Plan."""

    plan: Plan
    config: EngineConfig
    steptime: StepTimeModel
    charge_state: bool = True  # False when the pool is one an engine logged for KV alone

    @property
    def deployment(self):
        return self.plan.deployment

    @property
    def model_name(self) -> str:
        return self.plan.deployment.model.name

    @property
    def step_params(self) -> StepTimeParams:
        return self.steptime.params

    @property
    def state_blocks_per_sequence(self) -> int:
        return (
            state_blocks_per_sequence(self.plan.deployment, self.config.enable_prefix_caching)
            if self.charge_state
            else 0
        )

    def with_step_params(self, params: StepTimeParams) -> "SimDeployment":
        """The same deployment with other step-time constants (what calibrate varies)."""
        return SimDeployment(
            plan=self.plan,
            config=self.config,
            steptime=StepTimeModel(self.plan.deployment, params),
            charge_state=self.charge_state,
        )

    def new_engine(
        self, *, level: int = 0, trace: bool = False, fast_path: bool = True, token_times: bool = True
    ) -> Engine:
        """The one place a simulated engine is built: a fresh pool of exactly plan.num_kv_blocks blocks."""
        return Engine(
            self.plan.deployment,
            self.config,
            self.plan.num_kv_blocks,
            steptime=self.steptime,
            level=level,
            trace=trace,
            fast_path=fast_path,
            charge_state=self.charge_state,
            token_times=token_times,
        )

    def kv_layout(self) -> dict | None:
        """vLLM's layer groups as a dict (kneecap.plan.engines.VllmLayout) where a request's blocks are not its
        tokens' (layer kinds mixed, or sliding windows): what report counts its preflight limit with."""
        plan, d = self.plan, self.plan.deployment
        if plan.kv_groups is not None:
            return dataclasses.asdict(plan.kv_groups)
        if "sliding_attention" not in d.model.layer_types or plan.state_apart:
            return None
        from kneecap.plan.engines import model_layout

        return dataclasses.asdict(
            model_layout(d.model, tp=d.attention_tp, pp=d.pp, kv_dtype=d.kv_dtype, block_size=d.block_size)
        )

    def describe(self) -> dict:
        """JSON-ready facts (what summaries, /version and calibrations report)."""
        d, plan, cfg = self.plan.deployment, self.plan, self.config
        # the engine's scheduler under DP attention (sim/config.py DP_SCHEDULER_NOTE), as Engine builds it
        cfg = under_dp_attention(cfg, self.steptime.dp_ranks)
        ranked = self.steptime.for_engine(cfg.profile).rank_by_rank
        rank_tokens = dp_rank_tokens(cfg, self.steptime.dp_ranks) if ranked else 0
        return {
            "deployment": {
                "model": d.model.name,
                "gpu": d.gpu.name,
                "tp": d.tp,
                "pp": d.pp,
                "num_gpus": d.num_gpus,
                "weight_dtype": d.weight_dtype,
                "kv_dtype": d.kv_dtype,
                "block_size": d.block_size,
                "interconnect": d.gpu.interconnect,
            },
            "plan": {
                "num_kv_blocks": plan.num_kv_blocks,
                "kv_capacity_tokens": plan.kv_capacity_tokens,
                "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token_per_gpu,
                "kv_pool_bytes": plan.ledger.kv_pool_bytes,
                "context": plan.context,
                "pool_source": plan.pool_source,
                "state_blocks_per_sequence": self.state_blocks_per_sequence,
                # vLLM's layer groups (kneecap.plan.engines.VllmLayout) when the model mixes layer kinds: what a
                # request of L tokens takes of num_kv_blocks (report's preflight limit counts with it)
                "kv_layout": self.kv_layout(),
                # the unit of num_kv_blocks (and of server_metrics' num_kv_blocks): tokens x layers of one block
                "kv_block_tokens": plan.block_size,
                "kv_block_layers": plan.kv_groups.group_size
                if plan.kv_groups
                else sum(1 for k in stage_layer_types(d.model, d.pp) if k != "linear_attention"),
            },
            "engine": {
                "defaults": cfg.name,
                "max_num_seqs": cfg.max_num_seqs,
                "max_num_batched_tokens": cfg.max_num_batched_tokens,
                "enable_prefix_caching": cfg.enable_prefix_caching,
                "init_new_token_ratio": cfg.init_new_token_ratio,
                "scheduler_delay_factor": cfg.scheduler_delay_factor,
                "chunked_prefill": cfg.chunked_prefill,
                # each DP-attention rank's prompt tokens a step, where the engine splits its chunk between them
                **({"dp_rank_prompt_tokens": rank_tokens} if rank_tokens else {}),
                # where each DP-attention rank schedules on its own (sim/dp_ranks.py): its running-request cap and pool
                **(
                    {
                        "dp_rank_max_num_seqs": max(1, cfg.max_num_seqs // self.steptime.dp_ranks),
                        "dp_rank_kv_blocks": plan.num_kv_blocks // self.steptime.dp_ranks,
                    }
                    if ranked
                    else {}
                ),
                "profile": cfg.profile.version,
                # the API server's event loop before the engine (kneecap.sim.frontend), when it was asked for
                **(
                    {
                        "frontend": {
                            "ms_per_request": cfg.frontend_s_per_request * 1e3,
                            # the part that grows with the prompt (gpt-oss's harmony render), when there is one
                            **(
                                {"ms_per_prompt_token": cfg.frontend_s_per_prompt_token * 1e3}
                                if cfg.frontend_s_per_prompt_token
                                else {}
                            ),
                            "what": cfg.frontend_note,
                        }
                    }
                    if cfg.frontend_note
                    else {}
                ),
            },
            "step_time": self.steptime.params.to_dict(),
        }


def from_plan(
    plan: Plan,
    *,
    defaults: str = "vllm",
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    prefix_caching: bool | None = None,
    step_params: StepTimeParams | None = None,
    charge_state: bool | None = None,
    scheduler_delay_factor: float | None = None,
    engine_version: str | None = None,
    trtllm_bench: tuple[int, int] | None = None,
    speculative=None,
    spec_seed: int | None = None,
    endpoint: str = COMPLETIONS,
    frontend_ms_per_request: float | None = None,
) -> SimDeployment:
    """The named engine's defaults for this plan, at engine_version's release (sim/config.py at_release), with the
    user's overrides. trtllm_bench=(isl, osl): TensorRT-LLM as `trtllm-bench throughput` runs it for those lengths
    (the limits it computes, chunked prefills). speculative: a kneecap.sim.speculative.SpecDecoding (its draws seeded
    by spec_seed). charge_state defaults to True unless the plan's pool came from an engine log (pool_source
    "override"). endpoint "chat": requests come through the API server's /v1/chat/completions, whose event loop spends
    the engine release's chat-template cost on each before the engine sees it (sim/config.py chat_frontend_ms,
    kneecap.sim.frontend); frontend_ms_per_request: that cost given instead (any endpoint)."""
    d = plan.deployment
    if plan.num_kv_blocks < 1:
        raise KneecapError(
            f"{d.model.name} on {d.num_gpus}x {d.gpu.name} leaves no KV pool",
            "raise --tp, use a bigger GPU, or lower --weight-dtype / --overhead-gib",
        )
    base = engine_defaults(
        defaults,
        device_bytes=d.gpu.memory_bytes("device"),
        gpu_name=d.gpu.name,
        pool_tokens=plan.kv_capacity_tokens,
        context_len=plan.context,
        pp=d.pp,
        dp=d.attention_dp,
    )
    base = at_release(base, engine_version)
    if trtllm_bench is not None:
        if defaults != "trtllm":
            raise KneecapError(
                f"--trtllm-bench runs TensorRT-LLM's benchmark, not --engine-defaults {defaults}",
                "pass --engine-defaults trtllm",
            )
        seqs, tokens = trtllm_bench_limits(d, *trtllm_bench)
        # trtllm-bench captures CUDA graphs up to its own max_batch_size (sim/config.py TRTLLM_PROFILE's note)
        profile = replace(base.profile, cudagraph_sizes=())
        base = replace(base, max_num_seqs=seqs, max_num_batched_tokens=tokens, chunked_prefill=True, profile=profile)
    config = base.with_overrides(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        enable_prefix_caching=prefix_caching,
        scheduler_delay_factor=scheduler_delay_factor,
        speculative=speculative,
        spec_seed=spec_seed,
    )
    config = _with_frontend(config, d.model.name, endpoint, frontend_ms_per_request)
    if charge_state is None:
        charge_state = plan.pool_source != "override"
    return SimDeployment(plan=plan, config=config, steptime=StepTimeModel(d, step_params), charge_state=charge_state)


def _with_frontend(config: EngineConfig, model_name: str, endpoint: str, ms: float | None) -> EngineConfig:
    """The config with the API server's per-request event-loop cost of `endpoint` (or the given `ms`) set."""
    check_endpoint(endpoint)
    if ms is not None:  # EngineConfig refuses a negative or non-finite cost
        note = f"{endpoint} endpoint, {ms:g} ms per request as given"
        return replace(config, frontend_s_per_request=ms / 1e3, frontend_note=note)
    if endpoint == COMPLETIONS:
        return config
    ms, what = chat_frontend_ms(config.profile, model_name)
    per_token_ms = chat_frontend_ms_per_prompt_token(config.profile, model_name)
    note = f"chat endpoint, {ms:g} ms per request: {what}"
    return replace(
        config, frontend_s_per_request=ms / 1e3, frontend_s_per_prompt_token=per_token_ms / 1e3, frontend_note=note
    )


# The engine defaults (`--engine-defaults`) -> the engine whose DP-attention layout of the weights the plan counts
# (kneecap.plan.ledger.DP_ATTENTION_WHOLE_PARTS; NIM runs TensorRT-LLM).
DP_ATTENTION_ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm", "nim": "tensorrt-llm"}


def engine_pool_request(
    request: DeploymentRequest, defaults: str, engine_version: str | None = None
) -> DeploymentRequest:
    """The request whose Plan prices the KV pool as the named engine sizes it, where the planner's ledger is not that
    engine's rule. TensorRT-LLM (defaults "trtllm", and "nim": NIM's TensorRT-LLM profiles): KvCacheConfig's
    free_gpu_memory_fraction, 0.9 of the memory the CUDA runtime reports free once the model is loaded (sim/config.py
    TRTLLM_KV_FREE_GPU_MEM_FRACTION): the device total as the framework sees it (--hbm framework), less the weights and
    the ledger's overhead, times 0.9 (--frag 0.1). A request that states its own memory (--hbm, --frag or --kv-pool-gib
    off their defaults) is kept as given. vLLM's and SGLang's pools are the plan's engine models (request.engine, as
    `kneecap plan --engine`), at engine_version's release where it names one (sim/config.py release_number). Under DP
    attention the request also names the engine whose weight layout the ledger counts (DP_ATTENTION_ENGINES), unless it
    names one itself or sizes its pool by an engine's rule (request.engine: that engine's layout)."""
    if (
        request.dp_attention
        and request.dp_attention_engine is None
        and request.engine is None
        and defaults in DP_ATTENTION_ENGINES
    ):
        request = replace(request, dp_attention_engine=DP_ATTENTION_ENGINES[defaults])
    if request.engine is not None:
        return request if engine_version is None else replace(request, engine_version=release_number(engine_version))
    if (
        defaults not in ("trtllm", "nim")
        or request.kv_pool_gib is not None
        or request.hbm != DEFAULTS.hbm
        or request.frag != DEFAULTS.frag
    ):
        return request
    return replace(request, hbm="framework", frag=round(1.0 - TRTLLM_KV_FREE_GPU_MEM_FRACTION, 6))


def simulated_deployment(request: DeploymentRequest, **engine_knobs) -> SimDeployment:
    """A request -> its Plan (kneecap.plan.build, exactly as `kneecap plan`, with the engine's own pool rule:
    engine_pool_request) -> from_plan(plan, **engine_knobs)."""
    defaults, version = engine_knobs.get("defaults", "vllm"), engine_knobs.get("engine_version")
    plan, _ = plan_deployment(engine_pool_request(request, defaults, version))
    return from_plan(plan, **engine_knobs)
