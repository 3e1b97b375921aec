"""TensorRT-LLM's KV pool as the engine sizes it: free_gpu_memory_fraction 0.9 of the memory free once the model is
loaded, over the device total the CUDA runtime reports (sim/setup.py engine_pool_request), for `kneecap simulate
--engine-defaults trtllm` and the validation's TensorRT-LLM points alike."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kneecap.hardware import get_gpu
from kneecap.plan.build import DeploymentRequest, plan_deployment
from kneecap.sim.config import TRTLLM_KV_FREE_GPU_MEM_FRACTION
from kneecap.sim.setup import engine_pool_request, simulated_deployment

REQ = DeploymentRequest(
    model="llama-3.1-70b", gpu="rtx-pro-6000", tp=1, pp=4, weight_dtype="nvfp4", kv_dtype="fp8", context=2000
)


def test_the_pool_is_nine_tenths_of_what_the_framework_sees_free_after_loading():
    ledger = simulated_deployment(REQ, defaults="trtllm").plan.ledger
    gpu = get_gpu("rtx-pro-6000")
    free = gpu.memory_bytes("framework") - ledger.weights_bytes - ledger.overhead_bytes
    assert ledger.hbm_bytes == gpu.memory_bytes("framework")
    assert ledger.kv_pool_bytes == pytest.approx(TRTLLM_KV_FREE_GPU_MEM_FRACTION * free, rel=1e-6)


def test_other_engines_and_stated_memory_keep_the_planners_ledger():
    assert engine_pool_request(REQ, "vllm") is REQ and engine_pool_request(REQ, "sglang") is REQ
    for stated in (replace(REQ, hbm="device"), replace(REQ, frag=0.02), replace(REQ, kv_pool_gib=40.0)):
        assert engine_pool_request(stated, "trtllm") is stated
    ledger = plan_deployment(REQ).plan.ledger
    assert simulated_deployment(REQ, defaults="vllm").plan.ledger == ledger


def test_validation_prices_tensorrt_llm_points_with_the_same_pool():
    from kneecap import validation

    point = next(p for p in validation.load_points() if p.engine == "tensorrt-llm" and p.pp > 1)
    plan = validation._plan(point)
    req = DeploymentRequest(
        model=point.model_spec(),
        gpu=point.gpu,
        tp=point.tp,
        pp=point.pp,
        weight_dtype=point.weight_dtype,
        kv_dtype=point.kv_dtype,
        context=point.isl + point.osl,
    )
    assert plan.ledger == simulated_deployment(req, defaults="trtllm").plan.ledger
    assert plan.ledger != plan_deployment(req).plan.ledger
