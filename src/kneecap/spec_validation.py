"""Speculative decoding against published speedups: each point's deployment simulated without and with its
drafts (the method, K and the acceptance it was measured at), the ratio of per-user output speed compared with the
published one. Pure but for reading its data file; `python -m kneecap.spec_validation` prints the table that
docs/speculative-and-routing.md carries. Long story: docs/speculative-and-routing.md, "Against published speedups".

A published acceptance is a mean accepted length (tokens kept per verify step, the bonus token included); the
simulator takes the per-position rate a that gives it with K drafts: 1 + a + a^2 + ... + a^K = that length.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from kneecap.errors import KneecapError

POINTS_FILE = Path(__file__).parent / "data" / "validation" / "spec_points.json"
SIM_REQUESTS = 16  # one request at a time in every point: 16 x OSL draws of the acceptance settle its mean


@dataclass(frozen=True)
class SpecPoint:
    source: str
    deployment: dict
    method: str
    tokens: int
    accepted_length: float
    speedup: float  # published: per-user output speed with speculation over without (or over `over`)
    over: dict | None = None  # the speculating configuration the speedup is measured against (None: no drafts)
    label: str = ""
    tpot_ms: tuple[float, float] | None = None  # published TPOTs (baseline, speculating) where the source gives them


def load_points(path: Path = POINTS_FILE) -> tuple[dict, list[SpecPoint]]:
    doc = json.loads(path.read_text())
    points = [
        SpecPoint(
            source=p["source"],
            deployment=doc["deployments"][p["deployment"]],
            method=p["method"],
            tokens=p["tokens"],
            accepted_length=p["accepted_length"],
            speedup=p["speedup"] if "speedup" in p else p["baseline_tpot_ms"] / p["tpot_ms"],
            over=p.get("over"),
            label=p.get("label", ""),
            tpot_ms=(p["baseline_tpot_ms"], p["tpot_ms"]) if "tpot_ms" in p else None,
        )
        for p in doc["points"]
    ]
    return doc["sources"], points


def position_rate(accepted_length: float, tokens: int) -> float:
    """The per-position acceptance a with 1 + a + ... + a^tokens = accepted_length (bisection; 0 < a < 1)."""
    if not 1.0 <= accepted_length < tokens + 1:
        raise KneecapError(
            f"a mean accepted length of {accepted_length} is impossible with {tokens} draft tokens",
            f"it lies between 1 and {tokens + 1}",
        )
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(tokens + 1)) < accepted_length:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 4)


def _flags(d: dict) -> list[str]:
    return [
        "--preset", d["preset"], "--gpu", d["gpu"], "--tp", str(d["tp"]), "--ep", str(d["ep"]),
        "--weight-dtype", d["weight_dtype"], "--engine-defaults", d["engine_defaults"],
        "--isl", str(d["isl"]), "--osl", str(d["osl"]), "--concurrency", str(d["concurrency"]),
        "--requests", str(SIM_REQUESTS),
    ]  # fmt: skip


def _spec_flags(method: str, tokens: int, accepted_length: float) -> list[str]:
    rate = position_rate(accepted_length, tokens)
    return ["--spec-method", method, "--spec-tokens", str(tokens), "--spec-acceptance", f"{rate:g}"]


def commands(point: SpecPoint) -> tuple[str, str]:
    """The two `kneecap simulate` command lines whose p50 TPOT ratio is the point's prediction (baseline first)."""
    base = _flags(point.deployment)
    if point.over:
        base += _spec_flags(point.method, point.over["tokens"], point.over["accepted_length"])
        spec = _flags(point.deployment) + _spec_flags(point.method, point.tokens, point.accepted_length)
    else:
        spec = base + _spec_flags(point.method, point.tokens, point.accepted_length)
    return "kneecap simulate " + " ".join(base), "kneecap simulate " + " ".join(spec)


def _tpot_ms(d: dict, spec) -> float:
    from kneecap.levels import SweepLevel
    from kneecap.plan.build import DeploymentRequest
    from kneecap.sim.level_driver import PlannedLevelDriver, SimulateOptions
    from kneecap.sim.setup import simulated_deployment
    from kneecap.sim.sweep import LevelSpec
    from kneecap.sweep.door import run_one_level
    from kneecap.workload import LengthDist, RequestClass, Workload, make_requests

    request = DeploymentRequest(
        preset=d["preset"], gpu=d["gpu"], tp=d["tp"], ep=d["ep"], weight_dtype=d["weight_dtype"]
    )
    sim = simulated_deployment(request, defaults=d["engine_defaults"], speculative=spec, spec_seed=0)
    workload = Workload(classes=(RequestClass(input=LengthDist.fixed(d["isl"]), output=LengthDist.fixed(d["osl"])),))
    # the requests `kneecap simulate` sends at its first level (their ids seed each one's acceptance draws), so the
    # commands printed beside a row give its figures
    specs = tuple(make_requests(workload, SIM_REQUESTS, seed=0, start_index=0, id_prefix="L0r"))
    level = LevelSpec(concurrency=d["concurrency"], num_requests=SIM_REQUESTS, specs=specs)
    summary, _ = run_one_level(
        SimulateOptions(kind="concurrency", levels=(d["concurrency"],), requests=SIM_REQUESTS),
        PlannedLevelDriver(sim, workload, level, seed=0),
        SweepLevel(index=0, value=d["concurrency"], num_requests=SIM_REQUESTS, num_warmup=0, first_index=0),
    )
    return float(summary["tpot_ms"]["p50"])


def simulated_tpots_ms(point: SpecPoint, cache: dict | None = None) -> tuple[float, float]:
    """The simulated p50 TPOTs of the point's baseline and speculating runs (`cache`: runs already simulated, keyed
    by their command line)."""
    from kneecap.sim.speculative import SpecDecoding

    def spec(tokens: int, accepted_length: float):
        return SpecDecoding(point.method, tokens, (position_rate(accepted_length, tokens),), ())

    cache = {} if cache is None else cache
    base = spec(point.over["tokens"], point.over["accepted_length"]) if point.over else None
    out = []
    for cmd, s in zip(commands(point), (base, spec(point.tokens, point.accepted_length))):
        if cmd not in cache:
            cache[cmd] = _tpot_ms(point.deployment, s)
        out.append(cache[cmd])
    return out[0], out[1]


def predict(point: SpecPoint) -> float:
    """The simulated speedup: p50 TPOT of the baseline over p50 TPOT of the speculating run."""
    base_ms, spec_ms = simulated_tpots_ms(point)
    return base_ms / spec_ms


def error_rows(points: list[SpecPoint] | None = None) -> list[dict]:
    if points is None:
        _, points = load_points()
    rows, cache = [], {}
    for p in points:
        base_ms, spec_ms = simulated_tpots_ms(p, cache)
        simulated = base_ms / spec_ms
        rows.append(
            {
                "point": p,
                "simulated": simulated,
                "simulated_tpot_ms": (base_ms, spec_ms),
                "error_pct": (simulated / p.speedup - 1) * 100,
                "commands": commands(p),
            }
        )
    return rows


def median_abs_error_pct(rows: list[dict]) -> float:
    return statistics.median(abs(r["error_pct"]) for r in rows) if rows else math.nan


def render_markdown(rows: list[dict], sources: dict) -> str:
    ids = {name: i + 1 for i, name in enumerate(sources)}
    lines = [
        "| source | K | accepted length (published) | per-position rate | speedup published | simulated | error |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        p = r["point"]
        what = f"[{ids[p.source]}] {p.method}" + (f" ({p.label}, over K={p.over['tokens']} at "
                                                   f"{p.over['accepted_length']})" if p.over else "")  # fmt: skip
        lines.append(
            f"| {what} | {p.tokens} | {p.accepted_length:.2f} | {position_rate(p.accepted_length, p.tokens):.4f} "
            f"| {p.speedup:.2f}x | {r['simulated']:.2f}x | {r['error_pct']:+.1f}% |"
        )
    signed = statistics.median(r["error_pct"] for r in rows)
    lines += [
        "",
        f"{len(rows)} points: median absolute error {median_abs_error_pct(rows):.1f}%, signed median {signed:+.1f}% "
        "(+: the simulator predicts more speedup than was measured). By method:",
        "",
    ]
    for method in dict.fromkeys(r["point"].method for r in rows):
        of = [r for r in rows if r["point"].method == method]
        lines.append(
            f"- {method}: {len(of)} points, median absolute error {median_abs_error_pct(of):.1f}%, signed median "
            f"{statistics.median(r['error_pct'] for r in of):+.1f}%"
        )
    timed = [r for r in rows if r["point"].tpot_ms]
    if timed:
        lines += [
            "",
            "Where the source gives the TPOTs themselves (ms, p50 simulated):",
            "",
            "| source | K | baseline published | baseline simulated | speculating published | speculating simulated |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in timed:
            p, (sim_base, sim_spec) = r["point"], r["simulated_tpot_ms"]
            (pub_base, pub_spec), what = p.tpot_ms, f"[{ids[p.source]}] {p.method}"
            lines.append(f"| {what} | {p.tokens} | {pub_base:.2f} | {sim_base:.2f} | {pub_spec:.2f} | {sim_spec:.2f} |")
    lines.append("")
    for name, i in ids.items():
        lines.append(f"[{i}] {sources[name]['title']} — <{sources[name]['url']}>. {sources[name]['setup']}.  ")
    lines += ["", "Each row's prediction is the ratio of the p50 TPOT of these two commands (baseline first):", ""]
    seen = set()
    for r in rows:
        for cmd in r["commands"]:
            if cmd not in seen:
                seen.add(cmd)
                lines.append(f"    {cmd}")
    return "\n".join(lines) + "\n"


def main() -> int:  # pragma: no cover - a maintenance entry point
    sources, points = load_points()
    print(render_markdown(error_rows(points), sources), end="")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
