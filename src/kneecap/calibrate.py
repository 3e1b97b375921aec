"""Calibration: fit the step-time model's efficiency factors to a measured sweep, by least squares over its levels.

Owns the fit (what is compared, the residuals, the solver) and the measured-level adapter; not the step-time
formula (kneecap.sim.steptime) nor files (cli/calibrate.py). Pure: data in, data out; the simulator runs
in virtual time.

What is fitted (kneecap.sim.steptime.StepTimeParams): `mfu` (fraction of dense peak FLOP/s), `bw_efficiency`
(fraction of datasheet HBM bandwidth) and `overhead_s` (fixed seconds per step) by default; any other float
field may be named. What is compared, per measured level (STATISTICS): mean TTFT, mean TPOT, median ITL and
output tokens/s, each as log(predicted / measured) so that a 10% miss weighs the same on any metric and scale.
Predictions come from replaying each level in the simulated engine as it ran (same index, seed, warmup,
duration mode and load) with the level's mean input and output lengths, through the one level runner
(kneecap.sweep.runner) on the virtual-clock driver: the level summaries `kneecap simulate` would write.

Why these statistics: bw_efficiency and overhead_s are both a cost per step, but for the KV reads, so what
separates them is the decode step at different batch sizes. The median ITL is that step (a median over every
token of the level, so a decode-only step at the level's typical batch): at a low load it is weights / bandwidth
+ overhead, at a high load the KV reads of the whole batch are added. Mean TTFT and TPOT carry the prefill
(mfu) and queueing; throughput the saturated levels. Medians of TTFT and TPOT (the statistics before) pick one
request's value, which jumps as soon as a step boundary crosses an arrival; means and the token-level median
jump far less (a mean over the level's requests moves by a fraction of a step when one request changes batch;
the median over its thousands of tokens between neighbouring decode steps).

Solver: scipy.optimize.least_squares (trust-region reflective) on log-parameters inside log bounds, with a
forward-difference Jacobian whose step is fixed in log space. Open loop, the simulated statistics are still
piecewise smooth in the constants (a small change moves a step boundary past an arrival and a batch
changes), so the fit runs in rounds:
  1. each residual's jitter is measured at the current point: the largest half second difference over a
     +-0.5% stencil in each fitted factor (about zero for a smooth residual, the jump size for a stepped
     one); its weight becomes 1 / (1 + (jitter / JITTER_SCALE)^2), so a residual that jumps by more than
     it trends stops steering the fit (it is still predicted, reported and counted in the rms);
  2. a weighted least-squares fit from there: a coarse 3% step in the first round (it sees the trend
     through any jumps left), 1% after;
  repeated at the new point until a round moves no factor by more than 0.1% (at most WEIGHT_ROUNDS).
Of every point the rounds evaluated, the one with the lowest reported (unweighted) rms is the result.
The rate factors (mfu, bw_efficiency, link_efficiency) are bounded by 0.01-0.02 and 4.0: the GPU measured may be
faster than the catalog's achievable figure as well as slower, and a start on a bound (the catalog's 1.0 was one) is
moved START_MARGIN inside, where the solver can step both ways. tests/calibrate/test_calibrate.py recovers five
constant sets (each factor 0.5-1.4) within 2% at rms < 0.005 on a concurrency and a rate sweep. An open-loop
sweep needs enough decode steps per request: the same 2/16/64 req/s sweep with 64 output tokens instead of 128 left
mfu 1.4 / bw_efficiency 0.5 at bw_efficiency +10% and overhead_s +36% (rms 0.0072), a ridge its busy levels' jitter
hid and the condition number (185) did not flag.
Both the statistics and the weighting are needed (tests/calibrate/fit_study.py prints each case): with these
statistics and every weight 1, six open-loop sweeps (seeds 0-5, rates 2-128/s, three true-constant triples)
miss bw_efficiency by 1.4-33% and overhead_s by 2.9-74%; with the weighting every one is recovered within 0.3%,
for JITTER_SCALE anywhere from 1e-5 to 1e-3 (the scale is not tuned to one sweep); the p50 statistics with the
weighting missed the 4,32,128 req/s seed-1 sweep by -24% / -76%. tests/calibrate/test_calibrate.py checks
recovery within 1% on ten closed- and open-loop shapes.
A closed-loop sweep's residuals are all smooth (every weight 1: plain least squares). The reported rms log
error is over every residual, unweighted; each level row carries the weights of the last round.

Identifiability: at the result the fit's weighted Jacobian (residuals by log-factors) is decomposed; when its
condition number (largest / smallest singular value) is above CONDITION_LIMIT the sweep cannot tell the factors
of the weakest direction apart (one concurrency-1 level: 2.8e4; only saturated levels: 1.4e3; the sweeps the
tests fit: 16-34), and the result carries a warning naming them instead of passing off a guess as a fit.
A fitted factor that ends on one of its bounds (within AT_BOUND) is named in `at_bound` and in a warning: the solver
wanted it further out, so its value is the bound's, which the sweep did not determine.
Deterministic: no random starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from kneecap.errors import KneecapError
from kneecap.metrics.summary_model import LevelSummary, SweepFields, SweepSummary, WorkloadFields

DEFAULT_FIT = ("mfu", "bw_efficiency", "overhead_s")
# The compared statistic of each metric (summary.json's `levels[]`): means of TTFT and TPOT, the median ITL,
# throughput. (level field, summary key, statistic or None for a scalar)
STATISTICS = {
    "ttft_ms": ("ttft_ms", "mean"),
    "tpot_ms": ("tpot_ms", "mean"),
    "itl_ms": ("itl_ms", "p50"),
    "output_tok_s": ("output_tok_s", None),
}
METRICS = tuple(STATISTICS)
# bounds of each fitted factor (the solver's bounds, in log space): the rate scales reach above 1.0, since the GPU
# measured may be faster than the catalog's achievable figure as well as slower (sim/steptime.py FACTOR_MAX)
BOUNDS = {
    "mfu": (0.01, 4.0),
    "bw_efficiency": (0.02, 4.0),
    "link_efficiency": (0.02, 4.0),
    "overhead_s": (1e-5, 0.5),
    "allreduce_base_latency_s": (1e-7, 1e-3),
}
START_MARGIN = 0.05  # the fit starts at least this far (in log space, ~5%) inside its bounds, never on one
MAX_SIM_REQUESTS = 4096  # requests simulated per level per evaluation (bounded cost)
COARSE_STEP = 0.03  # forward-difference step in log-parameter space of the first round (3%)
FINE_STEP = 0.01  # forward-difference step of the later rounds (1%)
JITTER_STEP = 0.005  # half-width, in log-parameter space, of the stencil that measures a residual's jitter
JITTER_SCALE = 1e-4  # a residual that jitters this much (log units) gets weight 1/2; 10x more, 1/101
WEIGHT_ROUNDS = 5  # measure the jitter and refit at most this many times,
SETTLED = 1e-3  # until a refit moves no factor by more than 0.1%
CONDITION_LIMIT = 1e3  # a fit whose Jacobian's condition number is above this cannot separate its factors
WEAK_COMPONENT = 0.3  # a factor whose share of the weakest direction is at least this is named in the warning
AT_BOUND = 0.01  # a fitted factor within 1% (in log space) of one of its BOUNDS ended on it: the solver stopped there


@dataclass(frozen=True)
class MeasuredLevel:
    """One level of a measured sweep: its load, mean lengths (tokens) and the three compared metrics."""

    concurrency: int | None
    rate: float | None
    isl: int
    osl: int
    num_requests: int  # measured (completed) requests; the simulation sends as many
    ttft_ms: float  # mean TTFT
    tpot_ms: float  # mean TPOT
    output_tok_s: float
    itl_ms: float | None = None  # median ITL (a decode step); None: not compared
    warmup: int = 0  # warmup requests sent before the measured ones (excluded from the metrics)
    index: int = 0  # the level's place in its sweep (the simulator seeds level i with seed + i)
    seed: int = 0  # the sweep's --seed
    duration_s: float | None = None  # the sweep's --duration (requests sent until then), else None
    burstiness: float = 1.0  # open loop: the gamma shape of the sweep's arrivals

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise KneecapError("a measured level needs a concurrency or a rate", "calibrate on a bench summary.json")
        for name in METRICS:
            value = getattr(self, name)
            if value is None and name == "itl_ms":
                continue
            if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise KneecapError(
                    f"measured level {self.load}: {name} must be a positive number, got {value!r}",
                    "calibrate on levels whose requests completed with more than one output token",
                )
        if self.isl < 1 or self.osl < 2:
            raise KneecapError(
                f"measured level {self.load}: needs isl >= 1 and osl >= 2 (TPOT), got {self.isl}/{self.osl}",
                "calibrate on a sweep with --osl 2 or more",
            )

    @property
    def load(self) -> str:
        return f"C={self.concurrency}" if self.concurrency is not None else f"rate={self.rate:g}"


def _steady_enough(level: LevelSummary) -> bool:
    """A measured level the fit may use: its client kept to its schedule (kneecap.metrics.stability). A level whose
    client fell behind offered the server less than its rate says, which its replay at that rate would not; a
    transient or over-capacity level is kept: it is replayed as it ran, just as long, so the simulated level is
    the same transient, or the same growing queue."""
    return level.stability is None or not level.stability.client_behind


def levels_from_summary(summary: dict, *, isl: int | None = None, osl: int | None = None) -> list[MeasuredLevel]:
    """The usable levels of a bench (or simulate) summary.json: completed requests, mean TTFT and TPOT, median ITL,
    throughput; levels whose client fell behind its schedule are left out (_steady_enough).
    Lengths: --isl/--osl if given, else the level's mean input/output tokens per completed request.
    Each level is replayed as it ran: its index, the sweep's seed, --duration, warmup and burstiness
    (summary.json `sweep`, which simulate writes and bench writes from its options)."""
    for flag, value, least in (("--isl", isl, 1), ("--osl", osl, 2)):  # TPOT needs a second output token
        if value is not None and value < least:
            raise KneecapError(
                f"{flag} must be a whole number >= {least}, got {value}",
                f"pass the sweep's {flag}, or leave {flag} out for each level's mean",
            )
    doc = SweepSummary.read(summary)
    if "levels" not in doc.model_fields_set:
        raise KneecapError("the summary has no levels list", "pass the summary.json written by kneecap bench --out DIR")
    sweep, workload = doc.sweep or SweepFields(), doc.workload or WorkloadFields()
    out = []
    for position, lv in enumerate(doc.levels):
        done = lv.completed or 0
        ttft, tpot, itl, tput = (statistic(lv, m) for m in ("ttft_ms", "tpot_ms", "itl_ms", "output_tok_s"))
        load_c, load_r = lv.concurrency, lv.rate
        if done < 1 or not ttft or not tpot or not tput or lv.partial or isinstance(load_c, str):
            continue
        if not _steady_enough(lv):  # the client behind: the server was offered less than the level's rate
            continue
        level_isl = isl or round((lv.input_tokens or 0) / done) or workload.isl
        level_osl = osl or round((lv.output_tokens or 0) / done) or workload.osl
        if not level_isl or not level_osl:
            raise KneecapError(
                f"level {load_c or load_r}: input/output token counts are missing",
                "pass --isl and --osl as the sweep used them",
            )
        sent = lv.requests or done
        out.append(
            MeasuredLevel(
                concurrency=load_c,
                rate=None if load_c is not None else load_r,
                isl=int(level_isl),
                osl=int(level_osl),
                num_requests=int(sent),
                ttft_ms=float(ttft),
                tpot_ms=float(tpot),
                output_tok_s=float(tput),
                itl_ms=None if not itl else float(itl),
                warmup=int(lv.warmup_excluded or 0),
                index=int(position if lv.level is None else lv.level),
                seed=int(sweep.seed or doc.seed or 0),
                duration_s=sweep.duration_s,
                burstiness=float(sweep.burstiness or 1.0),
            )
        )
    if not out:
        raise KneecapError(
            "the summary has no completed level with TTFT, TPOT and throughput whose client kept to its schedule",
            "calibrate on a sweep whose levels completed requests, sent on time",
        )
    return out


def replay_levels(target, params, levels: list[MeasuredLevel]) -> list[dict]:
    """Each measured level replayed as it ran (same index, seed, duration mode, warmup and load) by the one level
    runner's door (kneecap.sweep.door.run_sweep) on the virtual-clock driver, in memory: its level summaries, as
    `kneecap simulate` writes them. Levels that share their sweep's options run in one Sweep."""
    from itertools import groupby

    from kneecap.levels import LEVEL_INDEX_STRIDE, SweepLevel
    from kneecap.metrics.stop import StopLimits
    from kneecap.sim.level_driver import SimulateOptions, VirtualTimeDriver
    from kneecap.sweep.door import run_sweep
    from kneecap.sweep.runner import STATUS_INTERRUPTED, SweepState
    from kneecap.sweep.store import MemoryStore

    def sweep_options(lv: MeasuredLevel) -> SimulateOptions:  # what the levels of a measured sweep share
        return SimulateOptions(
            kind="concurrency" if lv.concurrency is not None else "rate",
            levels=(),
            isl=lv.isl,
            osl=lv.osl,
            warmup=lv.warmup,
            seed=lv.seed,
            burstiness=lv.burstiness,
            duration_s=lv.duration_s,
        )

    sim = target.with_step_params(params)
    out = []
    for opts, group in groupby(levels, key=sweep_options):
        group = list(group)
        values = tuple(lv.concurrency if lv.concurrency is not None else lv.rate for lv in group)
        opts = replace(opts, levels=values)
        state = SweepState()
        final = run_sweep(
            opts,
            VirtualTimeDriver(sim, opts),
            MemoryStore(),
            levels=[
                SweepLevel(
                    index=lv.index,
                    value=value,
                    num_warmup=lv.warmup,
                    num_requests=None if lv.duration_s is not None else min(lv.num_requests, MAX_SIM_REQUESTS),
                    first_index=lv.index * LEVEL_INDEX_STRIDE,
                )
                for lv, value in zip(group, values)
            ],
            state=state,
            limits=StopLimits(max_error_rate=1.0),
            fields=dict(kind="simulate", model_executed=False, benchmark_executed=False),
        )
        if final.status == STATUS_INTERRUPTED:
            raise KeyboardInterrupt
        out += state.levels
    return out


def predict_levels(target, params, levels: list[MeasuredLevel]) -> list[dict]:
    """The simulated engine's compared statistics (STATISTICS: mean TTFT and TPOT, median ITL, all ms; output
    tok/s) of each measured level, replayed as it ran (replay_levels)."""
    return [
        {m: statistic(LevelSummary.model_validate(s), m) for m in METRICS}
        for s in replay_levels(target, params, levels)
    ]


def statistic(level: LevelSummary, metric: str):
    """The compared statistic of `metric` in one level summary (STATISTICS), or None."""
    key, stat = STATISTICS[metric]
    value = getattr(level, key)
    return value if stat is None or value is None else getattr(value, stat)


def _residuals(levels: list[MeasuredLevel], predicted: list[dict], weights: dict) -> list[float]:
    """Weighted log(predicted / measured) per level and compared metric, in order (5 where nothing was predicted)."""
    res = []
    for level, pred in zip(levels, predicted):
        for m in METRICS:
            p, v = pred.get(m), getattr(level, m)
            if v is None:
                continue
            res.append(weights[m] * (math.log(p / v) if p and p > 0 else 5.0))
    return res


def rms_log_error(target, params, levels: list[MeasuredLevel]) -> float:
    """Root mean square of log(predicted / measured) over every level and compared metric, unweighted."""
    r = _residuals(levels, predict_levels(target, params, levels), {m: 1.0 for m in METRICS})
    return math.sqrt(sum(v * v for v in r) / len(r))


@dataclass
class CalibrationResult:
    """The fitted factors, the fit's quality and predicted vs measured per level."""

    params: object  # StepTimeParams (all fields: fitted ones changed, the rest as given)
    fitted: tuple[str, ...]
    initial: dict
    rms_log_error: float
    initial_rms_log_error: float
    iterations: int  # solver iterations (Jacobians), over every stage
    levels: list[dict] = field(default_factory=list)
    evaluations: int = 0  # replays of the measured sweep in the simulated engine
    condition: float = 1.0  # of the fit's weighted Jacobian at the result (largest / smallest singular value)
    warnings: list[str] = field(default_factory=list)
    at_bound: list[str] = field(default_factory=list)  # fitted factors that ended on one of their BOUNDS

    def to_dict(self) -> dict:
        return {
            "kind": "calibration",
            "step_time": self.params.to_dict(),
            "fitted": list(self.fitted),
            "initial": self.initial,
            "rms_log_error": round(self.rms_log_error, 6),
            "initial_rms_log_error": round(self.initial_rms_log_error, 6),
            "iterations": self.iterations,
            "evaluations": self.evaluations,
            "condition": round(self.condition, 1),
            "warnings": self.warnings,
            "at_bound": self.at_bound,
            "levels": self.levels,
        }


def level_table(levels: list[MeasuredLevel], predicted: list[dict], weights=None) -> list[dict]:
    """Predicted (predict_levels) vs measured per level, with the signed error in percent of the measured value
    and, when given, the weight (0-1) each metric had in the fit (`weights`: one per level and metric, in order)."""
    rows = []
    k = 0  # index of the level's first residual (a metric the level does not carry has none)
    for level, pred in zip(levels, predicted):
        meas = {m: getattr(level, m) for m in METRICS}
        row = {
            "concurrency": level.concurrency,
            "rate": level.rate,
            "isl": level.isl,
            "osl": level.osl,
            "measured": meas,
            "predicted": {m: None if pred[m] is None else round(pred[m], 4) for m in METRICS},
            "error_pct": {
                m: None if not pred[m] or meas[m] is None else round(100.0 * (pred[m] - meas[m]) / meas[m], 2)
                for m in METRICS
            },
        }
        compared = [m for m in METRICS if meas[m] is not None]
        if weights is not None:
            row["weight"] = {m: round(float(weights[k + j]), 4) for j, m in enumerate(compared)}
        k += len(compared)
        rows.append(row)
    return rows


def identifiability(jac, fit: tuple[str, ...]) -> tuple[float, dict]:
    """(condition number, weakest direction) of a Jacobian of residuals by log-parameters: the largest over the
    smallest singular value, and the right singular vector of the smallest ({factor: component}, unit length)."""
    import numpy as np

    _, singular, vt = np.linalg.svd(np.asarray(jac, dtype=float), full_matrices=False)
    condition = float(singular[0] / singular[-1]) if singular[-1] > 0 else math.inf
    return condition, {n: float(v) for n, v in zip(fit, vt[-1])}


def unidentified_warning(condition: float, weakest: dict) -> list[str]:
    """One line when the sweep cannot separate the fitted factors (condition above CONDITION_LIMIT), naming the
    factors that move together along the weakest direction; else nothing."""
    if condition <= CONDITION_LIMIT:
        return []
    names = [n for n, v in sorted(weakest.items(), key=lambda kv: -abs(kv[1])) if abs(v) >= WEAK_COMPONENT]
    what = " and ".join(names) if len(names) > 1 else f"{names[0]} from the others" if names else "the factors"
    return [
        f"this sweep cannot separate {what} (condition number {condition:.3g} of the fit): their fitted values "
        "trade off against each other and may be far from the engine's; add levels at other loads (a "
        "concurrency 1 level and one that fills the batch) and calibrate again"
    ]


def bound_warnings(params, fit: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(the fitted factors that ended within AT_BOUND of one of their BOUNDS, one warning line each): the solver
    stopped against the bound, so the value is the bound's, not one the sweep determined."""
    names, lines = [], []
    for name in fit:
        value = getattr(params, name)
        for side, bound in zip(("lower", "upper"), BOUNDS[name]):
            if abs(math.log(value / bound)) <= AT_BOUND:
                names.append(name)
                lines.append(
                    f"{name} hit its {side} bound {bound:g}: the sweep does not determine it (or a factor left "
                    "out of --fit is off), so the calibration holds the bound, not a measured value; measure more "
                    "levels at other loads, or fit other factors"
                )
                break
    return names, lines


def calibrate(
    target,
    levels: list[MeasuredLevel],
    *,
    fit: tuple[str, ...] = DEFAULT_FIT,
    start=None,
    max_iterations: int = 25,
    weights: dict | None = None,
) -> CalibrationResult:
    """Fit `fit` (StepTimeParams field names) from `start` (default: target.step_params) to the measured levels.
    `weights`: a weight per compared metric (default 1 each); `max_iterations`: least-squares
    evaluations per round."""
    import numpy as np
    from scipy.optimize import least_squares

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
    # a start on (or beyond) a bound is moved inside it: at a bound the solver's first step has one side only
    x = np.clip(np.log([max(getattr(start, n), BOUNDS[n][0]) for n in fit]), lo + START_MARGIN, hi - START_MARGIN)
    cache: dict[tuple, list[dict]] = {}

    def params_at(x) -> StepTimeParams:
        return replace(start, **{n: float(math.exp(v)) for n, v in zip(fit, x)})

    def predicted(x) -> list[dict]:  # every replay is deterministic: remember each point's
        key = tuple(float(v) for v in x)
        if key not in cache:
            cache[key] = predict_levels(target, params_at(x), levels)
        return cache[key]

    def residuals(x) -> np.ndarray:
        return np.asarray(_residuals(levels, predicted(x), w), dtype=float)

    def jacobian(f, x, step: float) -> np.ndarray:
        """Forward differences of f at x, `step` in log space (backward where the bound is nearer)."""
        f0 = f(x)
        jac = np.empty((len(f0), len(x)))
        for j in range(len(x)):
            h = step if x[j] + step <= hi[j] else -step
            xj = x.copy()
            xj[j] += h
            jac[:, j] = (f(xj) - f0) / h
        return jac

    def jitter_weights(x) -> np.ndarray:
        """1 / (1 + (jitter / JITTER_SCALE)^2) per residual, jitter the largest half second difference over
        a +-JITTER_STEP stencil in each factor; normalised so the smoothest residual weighs 1."""
        f0 = residuals(x)
        jitter = np.zeros_like(f0)
        for j in range(len(x)):
            if x[j] - JITTER_STEP < lo[j] or x[j] + JITTER_STEP > hi[j]:
                continue
            e = np.zeros_like(x)
            e[j] = JITTER_STEP
            jitter = np.maximum(jitter, np.abs(residuals(x + e) + residuals(x - e) - 2.0 * f0) / 2.0)
        wt = 1.0 / (1.0 + (jitter / JITTER_SCALE) ** 2)
        return wt / wt.max()

    def solve(f, x, step: float):
        sol = least_squares(
            f,
            x,
            jac=lambda x: jacobian(f, x, step),
            bounds=(lo, hi),
            method="trf",
            x_scale=1.0,
            max_nfev=max(1, max_iterations),
        )
        return sol.x, int(sol.njev or 0)

    initial_rms = math.sqrt(float(np.mean(residuals(x) ** 2)))
    iterations = 0
    for rnd in range(WEIGHT_ROUNDS):
        wt = jitter_weights(x)
        x_before = x
        x, n = solve(lambda x, wt=wt: wt * residuals(x), x, COARSE_STEP if rnd == 0 else FINE_STEP)
        iterations += n
        if float(np.max(np.abs(x - x_before))) < SETTLED:
            break

    # the rounds minimise the weighted residuals; of every point they evaluated, keep the one whose unweighted rms
    # (the reported figure, every statistic counted) is lowest: a jump the weights hid can sit between the last
    # point and the constants that replay the sweep best
    def rms(key) -> float:
        return math.sqrt(float(np.mean(np.asarray(_residuals(levels, cache[key], w), dtype=float) ** 2)))

    best = min(cache, key=rms)
    if rms(best) < rms(tuple(float(v) for v in x)):
        x = np.asarray(best, dtype=float)
    params = params_at(x)
    condition, weakest = identifiability(jacobian(lambda x: wt * residuals(x), x, FINE_STEP), fit)
    at_bound, bound_lines = bound_warnings(params, fit)
    return CalibrationResult(
        condition=condition,
        warnings=unidentified_warning(condition, weakest) + bound_lines,
        at_bound=at_bound,
        params=params,
        fitted=tuple(fit),
        initial={n: getattr(start, n) for n in fit},
        rms_log_error=math.sqrt(float(np.mean(residuals(x) ** 2))),
        initial_rms_log_error=initial_rms,
        iterations=iterations,
        evaluations=len(cache),
        levels=level_table(levels, predicted(x), wt),
    )
