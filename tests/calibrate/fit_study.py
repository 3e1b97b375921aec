"""How well `kneecap calibrate` recovers the constants a sweep was simulated at, sweep by sweep, under variants of
the fit (the numbers quoted in kneecap/calibrate.py's docstring). Not a test; run it:

    .venv/bin/python tests/calibrate/fit_study.py [weighted | unweighted | scale=1e-3 | p50] [SHAPE,...]

weighted: the fit as shipped; unweighted: every residual weight 1; scale=X: JITTER_SCALE X; p50: the statistics
before (p50 TTFT and TPOT, no ITL) with the weighting. Prints each shape's error per factor in percent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import kneecap.calibrate as cal
from kneecap.plan.build import DeploymentRequest
from kneecap.sim.setup import simulated_deployment

sys.path.insert(0, str(Path(__file__).parent))
from test_calibrate import FLAGS, SHAPES  # noqa: E402

EXTRA = {
    "c1": (["--concurrency", "1", "--requests", "16"], SHAPES["requests"][1]),
    "saturated": (["--rate", "200,400", "--requests", "96", "--seed", "1"], SHAPES["requests"][1]),
}


def main(mode: str = "weighted", names: str | None = None) -> None:
    if mode == "unweighted":
        cal.JITTER_SCALE = 1e9
    elif mode.startswith("scale="):
        cal.JITTER_SCALE = float(mode.split("=", 1)[1])
    elif mode == "p50":
        cal.STATISTICS.update(ttft_ms=("ttft_ms", "p50"), tpot_ms=("tpot_ms", "p50"))
        cal.STATISTICS.pop("itl_ms")
        cal.METRICS = tuple(cal.STATISTICS)
    elif mode != "weighted":
        raise SystemExit(f"unknown mode {mode!r}: weighted, unweighted, scale=X or p50")
    target = simulated_deployment(DeploymentRequest(preset="llama-3.1-8b", gpu="h100-sxm", context=8192))
    shapes = SHAPES | EXTRA
    with TemporaryDirectory() as tmp:
        for name in names.split(",") if names else shapes:
            args, truth = shapes[name]
            pairs = ",".join(f"{k}={v}" for k, v in truth.items())
            r = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "kneecap",
                    "simulate",
                    *FLAGS,
                    "--isl",
                    "600",
                    "--osl",
                    "64",
                    *args,
                    "--step-params",
                    pairs,
                    "--out",
                    f"{tmp}/{name}",
                    "--json",
                    "--no-report",
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            levels = cal.levels_from_summary(json.loads(r.stdout))
            if mode == "p50":
                levels = [cal.replace(lv, itl_ms=None) for lv in levels]
            t0 = time.time()
            result = cal.calibrate(target, levels)
            errors = {n: round(100 * (getattr(result.params, n) / v - 1), 2) for n, v in truth.items()}
            print(
                f"{name}: error % {errors}, condition {result.condition:.3g}, {result.evaluations} replays, "
                f"{time.time() - t0:.1f} s{'; warning' if result.warnings else ''}",
                flush=True,
            )


if __name__ == "__main__":
    main(*sys.argv[1:])
