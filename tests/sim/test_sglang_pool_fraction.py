"""The simulator's SGLang pools (engine_pool_request -> `kneecap plan --engine sglang`) take the mem_fraction_static
the point's SGLang release picks itself when the run does not state one, and the stated one when it does."""

from __future__ import annotations

from kneecap.plan.build import DeploymentRequest, plan_deployment
from kneecap.plan.engines import sglang_default_mem_fraction
from kneecap.sim.setup import engine_pool_request, simulated_deployment

B200_MIB = 183359  # nvidia-smi memory.total


def _request(**kw) -> DeploymentRequest:
    base = dict(preset="llama-3.1-8b", gpu="b200", tp=8, context=2048, engine="sglang")
    return DeploymentRequest(**{**base, **kw})


def test_an_unstated_fraction_is_the_releases_own():
    # SGLang 0.5.6 on a B200 at TP 8 keeps back 512 + 1.5 x 16,384 + 2 x 512 + 1,024 = 27,136 MiB: 0.852, not 0.88
    sized = engine_pool_request(_request(), "sglang", "0.5.6")
    _, pool = plan_deployment(sized)
    assert pool.fraction == sglang_default_mem_fraction(B200_MIB, 8, version="0.5.6").fraction == 0.852
    assert pool.fraction_source == "sglang default"
    sim = simulated_deployment(_request(), defaults="sglang", engine_version="0.5.6")
    assert sim.plan.ledger.kv_pool_bytes == plan_deployment(sized).plan.ledger.kv_pool_bytes
    stated = plan_deployment(engine_pool_request(_request(mem_fraction=0.88), "sglang", "0.5.6")).plan
    assert sim.plan.ledger.kv_pool_bytes < stated.ledger.kv_pool_bytes  # 0.852 of the memory, not 0.88


def test_a_stated_fraction_wins():
    _, pool = plan_deployment(engine_pool_request(_request(mem_fraction=0.82), "sglang", "0.5.6"))
    assert (pool.fraction, pool.fraction_source) == (0.82, "given")
