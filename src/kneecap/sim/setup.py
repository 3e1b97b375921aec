"""One simulated deployment, ready to instantiate engines: plan -> engine config, block count, step-time model.

Owns the wiring every front end repeats (`kneecap simulate`, `kneecap serve`, load-plan simulator
targets): the pool is exactly plan.num_kv_blocks, the scheduler defaults are the named engine's,
the step-time model is built once. Not flag parsing (cli/) nor the clock (sweep.py, serve).
"""

from __future__ import annotations

from dataclasses import dataclass

from kneecap.sim.config import EngineConfig, engine_defaults
from kneecap.sim.engine import Engine, state_blocks_per_sequence
from kneecap.sim.steptime import StepTimeModel, StepTimeParams


@dataclass(frozen=True)
class EngineSetup:
    """Everything an Engine needs, derived from one Plan (kneecap.plan.ledger.Plan)."""

    plan: object  # kneecap.plan.ledger.Plan (not imported here to keep this module light)
    config: EngineConfig
    steptime: StepTimeModel
    charge_state: bool = True  # False when the pool is one an engine logged for KV alone

    @property
    def deployment(self):
        return self.plan.deployment

    @property
    def num_kv_blocks(self) -> int:
        return self.plan.num_kv_blocks

    @property
    def state_blocks_per_sequence(self) -> int:
        return state_blocks_per_sequence(self.plan.deployment) if self.charge_state else 0

    def new_engine(self, *, level: int = 0, trace: bool = False, fast_path: bool = True) -> Engine:
        return Engine(self.plan.deployment, self.config, self.plan.num_kv_blocks, steptime=self.steptime, level=level,
                      trace=trace, fast_path=fast_path, charge_state=self.charge_state)

    def describe(self) -> dict:
        """JSON-ready facts of this setup (what summaries and /metrics cache_config_info report)."""
        d, plan, cfg = self.plan.deployment, self.plan, self.config
        return {
            "deployment": {"model": d.model.name, "gpu": d.gpu.name, "tp": d.tp, "pp": d.pp, "num_gpus": d.num_gpus,
                           "weight_dtype": d.weight_dtype, "kv_dtype": d.kv_dtype, "block_size": d.block_size,
                           "interconnect": d.gpu.interconnect},
            "plan": {"num_kv_blocks": plan.num_kv_blocks, "kv_capacity_tokens": plan.kv_capacity_tokens,
                     "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token_per_gpu,
                     "kv_pool_bytes": plan.ledger.kv_pool_bytes, "context": plan.context,
                     "pool_source": plan.pool_source, "state_blocks_per_sequence": self.state_blocks_per_sequence},
            "engine": {"defaults": cfg.name, "max_num_seqs": cfg.max_num_seqs,
                       "max_num_batched_tokens": cfg.max_num_batched_tokens,
                       "enable_prefix_caching": cfg.enable_prefix_caching,
                       "init_new_token_ratio": cfg.init_new_token_ratio,
                       "scheduler_delay_factor": cfg.scheduler_delay_factor},
            "step_time": self.steptime.params.to_dict(),
        }


def engine_setup(plan, *, defaults: str = "vllm", max_num_seqs: int | None = None,
                 max_num_batched_tokens: int | None = None, prefix_caching: bool | None = None,
                 step_params: StepTimeParams | None = None, charge_state: bool | None = None,
                 scheduler_delay_factor: float | None = None) -> EngineSetup:
    """The named engine's defaults for this plan, with the user's overrides. charge_state defaults to
    True unless the plan's pool came from an engine log (pool_source "override")."""
    d = plan.deployment
    base = engine_defaults(defaults, device_bytes=d.gpu.memory_bytes("device"), gpu_name=d.gpu.name,
                           pool_tokens=plan.kv_capacity_tokens, context_len=plan.context)
    config = base.with_overrides(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                 enable_prefix_caching=prefix_caching, scheduler_delay_factor=scheduler_delay_factor)
    if charge_state is None:
        charge_state = getattr(plan, "pool_source", "ledger") != "override"
    return EngineSetup(plan=plan, config=config, steptime=StepTimeModel(d, step_params), charge_state=charge_state)
