"""SimTarget: what one simulated engine runs — Plan (hence Deployment and the KV pool), EngineConfig and
step-time constants — built from plan flags exactly as `kneecap simulate` builds them.

Owns the flags -> (plan, engine config, step-time params) adapter shared by `kneecap serve`,
`kneecap calibrate` and the validation table; not the engine (kneecap.sim) nor any socket.
"""

from __future__ import annotations

from dataclasses import dataclass

from kneecap.errors import KneecapError


@dataclass(frozen=True)
class SimTarget:
    """One simulated deployment: kneecap.sim.setup.EngineSetup (plan, engine config, step-time model), the
    step-time constants it was built with, and the flags' served name. `plan.num_kv_blocks` is the pool."""

    setup: object  # kneecap.sim.setup.EngineSetup
    step_params: object  # kneecap.sim.steptime.StepTimeParams

    @property
    def plan(self):
        return self.setup.plan

    @property
    def config(self):
        return self.setup.config

    @property
    def steptime(self):
        return self.setup.steptime

    @property
    def charge_state(self) -> bool:
        return self.setup.charge_state

    @property
    def deployment(self):
        return self.setup.plan.deployment

    @property
    def model_name(self) -> str:
        return self.setup.plan.deployment.model.name

    def new_engine(self):
        return self.setup.new_engine()

    def describe(self) -> dict:
        """A JSON-able summary (served at /version and written beside calibrations)."""
        d = self.plan.deployment
        return {"model": d.model.name, "gpu": d.gpu.name, "tp": d.tp, "pp": d.pp, "weight_dtype": d.weight_dtype,
                "kv_dtype": d.kv_dtype, "block_size": d.block_size, "num_kv_blocks": self.plan.num_kv_blocks,
                "kv_capacity_tokens": self.plan.kv_capacity_tokens, "context": self.plan.context,
                "engine_defaults": self.config.name, "max_num_seqs": self.config.max_num_seqs,
                "max_num_batched_tokens": self.config.max_num_batched_tokens,
                "step_time": self.step_params.to_dict()}


def build_target(flags, *, engine_defaults: str = "vllm", max_num_seqs: int | None = None,
                 max_num_batched_tokens: int | None = None, step_params=None) -> SimTarget:
    """flags: kneecap.cli.plan.PlanFlags. step_params: StepTimeParams or None (the published defaults)."""
    from kneecap.cli.plan import build_from_flags
    from kneecap.sim.setup import engine_setup
    from kneecap.sim.steptime import StepTimeParams

    plan, _ = build_from_flags(flags)
    deployment = plan.deployment
    if plan.num_kv_blocks < 1:
        raise KneecapError(f"{deployment.model.name} on {deployment.num_gpus}x {deployment.gpu.name} leaves no KV pool",
                           "raise --tp, use a bigger GPU, or lower --weight-dtype / --overhead-gib")
    params = step_params or StepTimeParams()
    setup = engine_setup(plan, defaults=engine_defaults, max_num_seqs=max_num_seqs,
                         max_num_batched_tokens=max_num_batched_tokens, step_params=params)
    return SimTarget(setup=setup, step_params=params)


def load_step_params(path_or_pairs: str | None):
    """A calibration file (`kneecap calibrate --out`), any {"step_time": {...}} JSON, or k=v pairs -> StepTimeParams."""
    from kneecap.cli.simulate import parse_step_params

    return parse_step_params(path_or_pairs)
