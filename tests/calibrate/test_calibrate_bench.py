"""`kneecap calibrate` on sweeps that `kneecap bench` wrote against `kneecap serve` (the simulated engine over HTTP,
in real time) at known step-time constants: the levels parse as they ran, and the fit lands near the served
constants.

Real time adds what the virtual-time replay has not: HTTP, streaming and client time per request and token, and
the CPU share this machine gives the server. Measured here (2 cores shared with other jobs, these two shapes, the
compared statistics mean TTFT, mean TPOT, median ITL and throughput): the served constants themselves predict the
bench levels only to 0.059 (closed) and 0.031 (open) rms log error (C=1 mean TTFT 5%, 4 req/s 8% longer than
simulated; closed-loop C=4 10% shorter); the fit moved mfu by +10% (closed) and +0.4% (open). bw_efficiency and
overhead_s trade off along one valley (both are a fixed cost per step but for the KV reads, and these sweeps'
batches are small): the fit took them +43% / +77% (closed) and +29% / +59% (open) together, so they are not
checked one by one, and 1% does not hold in real time. What the fit must give is what it does identify: the
simulated decode step (TPOT at C=1; measured 1.1-1.4% off the served constants') within 10%, mfu within 20%,
and an rms within 30% (+0.002) of the served constants' own.
"""

from __future__ import annotations

import json

import pytest

from clitools import run_cli
from kneecap.calibrate import MeasuredLevel, calibrate, levels_from_summary, predict_levels, rms_log_error
from kneecap.plan.build import DeploymentRequest
from kneecap.sim.setup import simulated_deployment
from kneecap.sim.steptime import StepTimeParams

FLAGS = ["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192"]
SERVED = {"mfu": 0.45, "bw_efficiency": 0.7, "overhead_s": 0.003}
ISL, OSL = 600, 32
SHAPES = {
    "closed": (
        ["--concurrency", "1,4,16", "--requests", "24", "--warmup", "2", "--seed", "5"],
        "concurrency",
        [1, 4, 16],
        2,
        5,
    ),
    "open": (["--rate", "4,16,64", "--requests", "32", "--seed", "9"], "rate", [4.0, 16.0, 64.0], 0, 9),
}


def _measure(tmp_path_factory, shapes) -> dict:
    """The bench `shapes` against one `kneecap serve` at the SERVED constants: {shape: summary.json}."""
    from kneecap.cli.serve_process import start_server, stop_server

    pairs = ",".join(f"{k}={v}" for k, v in SERVED.items())
    proc, url = start_server([*FLAGS, "--calibration", pairs])
    out = {}
    try:
        for shape in shapes:
            args = SHAPES[shape][0]
            folder = tmp_path_factory.mktemp("bench") / shape
            r = run_cli(
                "bench", "--base-url", url, "--isl", str(ISL), "--osl", str(OSL), *args, "--out", str(folder), "--quiet"
            )
            assert r.code == 0, r.stderr
            out[shape] = json.loads((folder / "summary.json").read_text())
    finally:
        stop_server(proc)
    return out


@pytest.fixture(scope="module")
def served_sweeps(tmp_path_factory):
    """Both bench shapes against one `kneecap serve` at the SERVED constants: {shape: summary.json}."""
    return _measure(tmp_path_factory, SHAPES)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_bench_levels_parse_as_they_ran(served_sweeps, shape):
    args, kind, loads, warmup, seed = SHAPES[shape]
    levels = levels_from_summary(served_sweeps[shape])
    assert [getattr(lv, kind) for lv in levels] == loads
    assert all(getattr(lv, "rate" if kind == "concurrency" else "concurrency") is None for lv in levels)
    assert [lv.index for lv in levels] == [0, 1, 2]
    assert {(lv.isl, lv.osl, lv.warmup, lv.seed, lv.duration_s, lv.num_requests) for lv in levels} == {
        (ISL, OSL, warmup, seed, None, int(args[args.index("--requests") + 1]))
    }


def _fit_misses(summary: dict) -> list[str]:
    """What the fit of one bench summary gets wrong against the SERVED constants (empty: it lands near them)."""
    sim = simulated_deployment(DeploymentRequest(preset="llama-3.1-8b", gpu="h100-sxm", context=8192))
    levels = levels_from_summary(summary)
    served = StepTimeParams(**SERVED)
    result = calibrate(sim, levels)
    fitted = result.params
    report = (result.to_dict()["step_time"], rms_log_error(sim, served, levels), result.rms_log_error)
    misses = []
    # the fit minimises residuals weighted down where they jump (see kneecap.calibrate), while this compares the
    # unweighted rms: in real time it can sit a little above the served constants' own (measured in one CI run:
    # 0.0399 against 0.0328 on the open shape), never far
    if not result.rms_log_error <= 1.3 * rms_log_error(sim, served, levels) + 2e-3:
        misses.append(f"rms {report}")
    if fitted.mfu != pytest.approx(SERVED["mfu"], rel=0.20):
        misses.append(f"mfu {report}")
    c1 = MeasuredLevel(concurrency=1, rate=None, isl=ISL, osl=OSL, num_requests=8, ttft_ms=1, tpot_ms=1, output_tok_s=1)
    step_fitted, step_served = (predict_levels(sim, p, [c1])[0]["tpot_ms"] for p in (fitted, served))
    if step_fitted != pytest.approx(step_served, rel=0.10):
        misses.append(f"decode step {(step_fitted, step_served, report)}")
    return misses


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_bench_fit_lands_near_the_served_constants(served_sweeps, tmp_path_factory, shape):
    """The measurement is real time on a shared 2-core machine: a full CI run once fitted the open shape to an rms of
    0.046 against the served constants' own 0.021 (mfu 0.467, bw_efficiency 0.768), where the same test alone passes.
    So a shape whose first measurement misses is measured once more against a fresh server, and that one must land."""
    first = _fit_misses(served_sweeps[shape])
    if first:
        again = _fit_misses(_measure(tmp_path_factory, [shape])[shape])
        assert not again, (first, again)


def _served_fit(tmp_path, truth: dict) -> dict:
    """kneecap serve at `truth`, measured by kneecap bench over HTTP, fitted by kneecap calibrate."""
    from kneecap.cli.serve_process import start_server, stop_server

    proc, url = start_server([*FLAGS, "--calibration", ",".join(f"{k}={v}" for k, v in truth.items())])
    try:
        r = run_cli(
            "bench",
            "--base-url",
            url,
            "--isl",
            "1000",
            "--osl",
            "120",
            "--rate",
            "2,8",
            "--requests",
            "64",
            "--seed",
            "0",
            "--out",
            str(tmp_path / "bench"),
            "--quiet",
        )
        assert r.code == 0, r.stderr
    finally:
        stop_server(proc)
    r = run_cli(
        "calibrate",
        *FLAGS,
        "--summary",
        str(tmp_path / "bench" / "summary.json"),
        "--fit",
        "mfu,bw_efficiency",
        "--out",
        str(tmp_path / "c.json"),
    )
    assert r.code == 0, r.stderr
    return json.loads((tmp_path / "c.json").read_text())["step_time"]


def test_calibrate_returns_the_served_rate_factors_through_http(tmp_path):
    """The real path: `kneecap serve` at mfu 0.7 / bw_efficiency 0.85, measured by `kneecap bench` over HTTP in real
    time (a rate sweep, 2 and 8 req/s), then `kneecap calibrate --fit mfu,bw_efficiency` on that summary returns both
    within 5% (alone on 2 cores: 0.698 / 0.851 and 0.711 / 0.846; the overhead is the served default on both sides).
    The measurement is real time on a shared 2-core machine, where other processes can slow the server's steps for a
    while (one full CI run fitted bw_efficiency 0.841 and an mfu more than 5% off): a second measurement is taken when
    the first misses, and one of the two must land within 5%."""
    truth = {"mfu": 0.7, "bw_efficiency": 0.85}
    fits = []
    for attempt in range(2):
        fitted = _served_fit(tmp_path / f"try{attempt}", truth)
        fits.append({k: fitted[k] for k in truth})
        if all(fitted[k] == pytest.approx(v, rel=0.05) for k, v in truth.items()):
            return
    raise AssertionError(f"no fit within 5% of {truth}: {fits}")
