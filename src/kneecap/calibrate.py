"""Calibration: fit the step-time model's efficiency factors to a measured sweep, by least squares over its levels.

Owns the fit (what is compared, the residuals, the solver) and the measured-level adapter; not the step-time
formula (kneecap.sim.steptime) nor files (cli/calibrate.py). Pure: data in, data out; the simulator runs
in virtual time.

What is fitted (kneecap.sim.steptime.StepTimeParams): `mfu` (fraction of dense peak FLOP/s), `bw_efficiency`
(fraction of datasheet HBM bandwidth) and `overhead_s` (fixed seconds per step) by default; any other float
field may be named. What is compared, per measured level: p50 TTFT, p50 TPOT and output tokens/s, each as
log(predicted / measured) so that a 10% miss weighs the same on any metric and scale. Predictions come from
running the simulated engine (kneecap.sim.sweep.simulate_level) on the level's load with the level's mean
input and output lengths. Solver: Levenberg-Marquardt on log-parameters (bounded by clipping), finite-
difference Jacobian, numpy only (no scipy): each iteration solves (J^T J + lambda diag(J^T J)) d = -J^T r.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from kneecap.errors import KneecapError

DEFAULT_FIT = ("mfu", "bw_efficiency", "overhead_s")
METRICS = ("ttft_ms", "tpot_ms", "output_tok_s")
# bounds of each fitted factor (clipped after every update)
BOUNDS = {"mfu": (0.01, 1.0), "bw_efficiency": (0.02, 1.0), "link_efficiency": (0.02, 1.0),
          "overhead_s": (1e-5, 0.5), "allreduce_base_latency_s": (1e-7, 1e-3)}
MAX_SIM_REQUESTS = 4096  # requests simulated per level per evaluation (bounded cost)
FD_STEP = 0.03  # finite-difference step in log-parameter space (3%)


@dataclass(frozen=True)
class MeasuredLevel:
    """One level of a measured sweep: its load, mean lengths (tokens) and the three compared metrics."""

    concurrency: int | None
    rate: float | None
    isl: int
    osl: int
    num_requests: int  # measured (completed) requests; the simulation sends as many
    ttft_ms: float
    tpot_ms: float
    output_tok_s: float
    warmup: int = 0  # warmup requests sent before the measured ones (excluded from the metrics)
    index: int = 0  # the level's place in its sweep (the simulator seeds level i with seed + i)
    seed: int = 0  # the sweep's --seed
    duration_s: float | None = None  # the sweep's --duration (requests sent until then), else None
    burstiness: float = 1.0  # open loop: the gamma shape of the sweep's arrivals

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise KneecapError("a measured level needs a concurrency or a rate", "calibrate on a bench summary.json")
        for name in ("ttft_ms", "tpot_ms", "output_tok_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise KneecapError(f"measured level {self.load}: {name} must be a positive number, got {value!r}",
                                   "calibrate on levels whose requests completed with more than one output token")
        if self.isl < 1 or self.osl < 2:
            raise KneecapError(f"measured level {self.load}: needs isl >= 1 and osl >= 2 (TPOT), got {self.isl}/{self.osl}",
                               "calibrate on a sweep with --osl 2 or more")

    @property
    def load(self) -> str:
        return f"C={self.concurrency}" if self.concurrency is not None else f"rate={self.rate:g}"

    def as_dict(self) -> dict:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "output_tok_s": self.output_tok_s}


def levels_from_summary(summary: dict, *, isl: int | None = None, osl: int | None = None) -> list[MeasuredLevel]:
    """The usable levels of a bench (or simulate) summary.json: completed requests, p50 TTFT and TPOT, throughput.
    Lengths: --isl/--osl if given, else the level's mean input/output tokens per completed request.
    Each level is replayed as it ran: its index, the sweep's seed, --duration, warmup and burstiness
    (summary.json `sweep`, which simulate writes and bench writes from its options)."""
    if not isinstance(summary, dict) or not isinstance(summary.get("levels"), list):
        raise KneecapError("the summary has no levels list", "pass the summary.json written by kneecap bench --out DIR")
    sweep = summary.get("sweep") or {}
    out = []
    for position, lv in enumerate(summary["levels"]):
        done = lv.get("completed") or 0
        ttft = (lv.get("ttft_ms") or {}).get("p50")
        tpot = (lv.get("tpot_ms") or {}).get("p50")
        tput = lv.get("output_tok_s")
        load_c, load_r = lv.get("concurrency"), lv.get("rate")
        if done < 1 or not ttft or not tpot or not tput or lv.get("partial") or isinstance(load_c, str):
            continue
        level_isl = isl or round((lv.get("input_tokens") or 0) / done) or (summary.get("workload") or {}).get("isl")
        level_osl = osl or round((lv.get("output_tokens") or 0) / done) or (summary.get("workload") or {}).get("osl")
        if not level_isl or not level_osl:
            raise KneecapError(f"level {load_c or load_r}: input/output token counts are missing",
                               "pass --isl and --osl as the sweep used them")
        sent = lv.get("requests") or done
        out.append(MeasuredLevel(concurrency=load_c, rate=None if load_c is not None else load_r, isl=int(level_isl),
                                 osl=int(level_osl), num_requests=int(sent), ttft_ms=float(ttft), tpot_ms=float(tpot),
                                 output_tok_s=float(tput), warmup=int(lv.get("warmup_excluded") or 0),
                                 index=int(lv.get("level", position)), seed=int(sweep.get("seed") or summary.get("seed") or 0),
                                 duration_s=sweep.get("duration_s"), burstiness=float(sweep.get("burstiness") or 1.0)))
    if not out:
        raise KneecapError("the summary has no completed level with TTFT, TPOT and throughput",
                           "calibrate on a sweep whose levels completed requests")
    return out


def predict_level(target, params, level: MeasuredLevel) -> dict:
    """The simulated engine's p50 TTFT (ms), p50 TPOT (ms) and output tok/s for one measured level, replayed
    as it ran (same index, seed, duration mode, warmup and rate) by the one virtual-clock level driver."""
    from kneecap.levels import SweepLevel
    from kneecap.metrics.summarize import summarize_level
    from kneecap.sim.level_driver import SimulateOptions, VirtualTimeDriver

    kind = "concurrency" if level.concurrency is not None else "rate"
    value = level.concurrency if level.concurrency is not None else level.rate
    opts = SimulateOptions(kind=kind, levels=(value,), isl=level.isl, osl=level.osl, warmup=level.warmup,
                           seed=level.seed, burstiness=level.burstiness, duration_s=level.duration_s)
    n = None if level.duration_s is not None else min(level.num_requests, MAX_SIM_REQUESTS)
    plan = SweepLevel(index=level.index, value=value, num_requests=n, num_warmup=level.warmup, first_index=0)
    run = VirtualTimeDriver(target.with_step_params(params), opts).run_level(plan, keep=lambda record: None)
    s = summarize_level(run.records, concurrency=level.concurrency, rate=level.rate)
    return {"ttft_ms": (s.get("ttft_ms") or {}).get("p50"), "tpot_ms": (s.get("tpot_ms") or {}).get("p50"),
            "output_tok_s": s.get("output_tok_s")}


def _residuals(target, params, levels: list[MeasuredLevel], weights: dict) -> list[float]:
    res = []
    for level in levels:
        pred = predict_level(target, params, level)
        for m in METRICS:
            p, v = pred.get(m), getattr(level, m)
            res.append(weights[m] * (math.log(p / v) if p and p > 0 else 5.0))
    return res


@dataclass
class CalibrationResult:
    """The fitted factors, the fit's quality and predicted vs measured per level."""

    params: object  # StepTimeParams (all fields: fitted ones changed, the rest as given)
    fitted: tuple[str, ...]
    initial: dict
    rms_log_error: float
    initial_rms_log_error: float
    iterations: int
    levels: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"kind": "calibration", "step_time": self.params.to_dict(), "fitted": list(self.fitted),
                "initial": self.initial, "rms_log_error": round(self.rms_log_error, 6),
                "initial_rms_log_error": round(self.initial_rms_log_error, 6), "iterations": self.iterations,
                "levels": self.levels}


def level_table(target, params, levels: list[MeasuredLevel]) -> list[dict]:
    """Predicted vs measured per level, with the signed error in percent of the measured value."""
    rows = []
    for level in levels:
        pred = predict_level(target, params, level)
        meas = level.as_dict()
        rows.append({"concurrency": level.concurrency, "rate": level.rate, "isl": level.isl, "osl": level.osl,
                     "measured": meas, "predicted": {m: None if pred[m] is None else round(pred[m], 4) for m in METRICS},
                     "error_pct": {m: None if not pred[m] else round(100.0 * (pred[m] - meas[m]) / meas[m], 2) for m in METRICS}})
    return rows


def calibrate(target, levels: list[MeasuredLevel], *, fit: tuple[str, ...] = DEFAULT_FIT, start=None,
              max_iterations: int = 25, weights: dict | None = None) -> CalibrationResult:
    """Fit `fit` (StepTimeParams field names) from `start` (default: target.step_params) to the measured levels."""
    import numpy as np

    from kneecap.sim.steptime import StepTimeParams

    for name in fit:
        if name not in BOUNDS:
            raise KneecapError(f"cannot fit step-time parameter {name!r}", f"fit any of {', '.join(sorted(BOUNDS))}")
    if not fit:
        raise KneecapError("nothing to fit", f"name at least one of {', '.join(DEFAULT_FIT)}")
    start = start or target.step_params or StepTimeParams()
    w = {m: 1.0 for m in METRICS} | (weights or {})
    lo = np.log([BOUNDS[n][0] for n in fit])
    hi = np.log([BOUNDS[n][1] for n in fit])

    def params_at(x) -> StepTimeParams:
        return replace(start, **{n: float(math.exp(v)) for n, v in zip(fit, x)})

    def cost_of(r) -> float:
        return float(np.dot(r, r))

    x = np.clip(np.log([max(getattr(start, n), BOUNDS[n][0]) for n in fit]), lo, hi)
    r = np.asarray(_residuals(target, params_at(x), levels, w))
    initial_rms = math.sqrt(cost_of(r) / len(r))
    lam = 1e-2
    it = 0
    for it in range(1, max_iterations + 1):
        jac = np.empty((len(r), len(fit)))
        for j in range(len(fit)):
            step = FD_STEP if x[j] + FD_STEP <= hi[j] else -FD_STEP
            xj = x.copy()
            xj[j] += step
            jac[:, j] = (np.asarray(_residuals(target, params_at(xj), levels, w)) - r) / step
        jtj = jac.T @ jac
        g = jac.T @ r
        improved = False
        while lam < 1e8:
            a = jtj + lam * np.diag(np.maximum(np.diag(jtj), 1e-9))
            try:
                delta = np.linalg.solve(a, -g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            x_new = np.clip(x + delta, lo, hi)
            r_new = np.asarray(_residuals(target, params_at(x_new), levels, w))
            if cost_of(r_new) < cost_of(r):
                gain = cost_of(r) - cost_of(r_new)
                x, r = x_new, r_new
                lam = max(lam / 3, 1e-6)
                improved = True
                break
            lam *= 4
        if not improved or gain < 1e-10 * max(1.0, cost_of(r)) or float(np.max(np.abs(delta))) < 1e-4:
            break
    params = params_at(x)
    return CalibrationResult(params=params, fitted=tuple(fit), initial={n: getattr(start, n) for n in fit},
                             rms_log_error=math.sqrt(cost_of(r) / len(r)), initial_rms_log_error=initial_rms,
                             iterations=it, levels=level_table(target, params, levels))
