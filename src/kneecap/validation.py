"""Validation: the simulated engine against published measurements (data/validation/points.json).

Owns reading the published points, running the simulator on each configuration (the same Plan ->
Engine path as `kneecap simulate`, default step-time factors, never fitted to these points), the error
table and its markdown rendering for docs/validation.md. Does not fetch anything: every number comes
from the points file, which names its source URL per point.

Engines. "vllm": kneecap.sim.config vLLM defaults for the GPU. "tensorrt-llm": TensorRT-LLM's default
capacity scheduler is GUARANTEED_NO_EVICT (a request is admitted only if the pool can hold it to the end;
TensorRT-LLM docs, "Useful Runtime Options"), modelled as an admission reserve of 1.0 x the remaining
output of every running and new sequence; its batch limits come from the point (`engine_overrides`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kneecap.errors import KneecapError

DATA_DIR = Path(__file__).parent / "data" / "validation"
POINTS_FILE = DATA_DIR / "points.json"
METRICS = {"output_tok_s": "output tok/s", "ttft_ms_p50": "TTFT p50 (ms)", "tpot_ms_p50": "TPOT p50 (ms)",
           "tpot_ms_mean": "TPOT mean (ms)"}
TABLE_BEGIN = "<!-- BEGIN GENERATED TABLE (python -m kneecap.validation --write) -->"
TABLE_END = "<!-- END GENERATED TABLE -->"


@dataclass(frozen=True)
class Point:
    """One published measurement and the configuration it was taken on."""

    id: str
    source_url: str
    source_title: str
    engine: str
    model: str  # preset name, or a config path relative to data/validation/
    gpu: str
    tp: int
    weight_dtype: str | None
    isl: int
    osl: int
    concurrency: int | str  # an int, or "max" (every request queued at once: offline throughput)
    requests: int  # requests the publisher sent
    sim_requests: int  # requests simulated (fewer for the largest offline runs; stated in the table)
    metric: str
    published: float
    engine_overrides: dict
    note: str

    @classmethod
    def from_dict(cls, d: dict) -> "Point":
        try:
            point = cls(id=d["id"], source_url=d["source"]["url"], source_title=d["source"]["title"], engine=d["engine"],
                        model=d["model"], gpu=d["gpu"], tp=int(d.get("tp", 1)), weight_dtype=d.get("weight_dtype"),
                        isl=int(d["isl"]), osl=int(d["osl"]), concurrency=d["concurrency"], requests=int(d["requests"]),
                        sim_requests=int(d.get("sim_requests", d["requests"])), metric=d["metric"],
                        published=float(d["published"]), engine_overrides=dict(d.get("engine_overrides") or {}),
                        note=d.get("note", ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise KneecapError(f"validation point {d.get('id', '?')}: bad or missing field ({exc})",
                               "fix src/kneecap/data/validation/points.json") from None
        if point.metric not in METRICS:
            raise KneecapError(f"validation point {point.id}: unknown metric {point.metric!r}", f"use one of {sorted(METRICS)}")
        if point.engine not in ("vllm", "tensorrt-llm"):
            raise KneecapError(f"validation point {point.id}: unknown engine {point.engine!r}", "use vllm or tensorrt-llm")
        return point


def load_points(path: Path = POINTS_FILE) -> list[Point]:
    doc = json.loads(Path(path).read_text())
    return [Point.from_dict(d) for d in doc["points"]]


def _engine_config(point: Point, plan):
    from kneecap.sim.config import EngineConfig, engine_defaults

    d = plan.deployment
    if point.engine == "vllm":
        base = engine_defaults("vllm", device_bytes=d.gpu.memory_bytes("device"), gpu_name=d.gpu.name,
                               pool_tokens=plan.kv_capacity_tokens, context_len=plan.context)
        return base.with_overrides(**point.engine_overrides) if point.engine_overrides else base
    o = point.engine_overrides
    return EngineConfig(name="custom", max_num_seqs=int(o.get("max_num_seqs", 2048)),
                        max_num_batched_tokens=int(o.get("max_num_batched_tokens", 8192)), enable_prefix_caching=False,
                        init_new_token_ratio=1.0, min_new_token_ratio=1.0, new_token_ratio_decay=0.0)


def predict(point: Point) -> float:
    """Run the simulated engine on the point's configuration and return the published metric's prediction."""
    from kneecap.plan.build import DeploymentRequest, plan_deployment
    from kneecap.metrics.summarize import summarize_level
    from kneecap.sim.steptime import StepTimeModel
    from kneecap.sim.sweep import LevelSpec, simulate_level
    from kneecap.workload import LengthDist, RequestClass, Workload

    model = point.model
    if model.endswith(".json"):
        model = str(DATA_DIR / model)
    request = DeploymentRequest(model=model, gpu=point.gpu, tp=point.tp, weight_dtype=point.weight_dtype,
                                context=point.isl + point.osl)
    plan, _ = plan_deployment(request)
    config = _engine_config(point, plan)
    workload = Workload(classes=(RequestClass(input=LengthDist.fixed(point.isl), output=LengthDist.fixed(point.osl)),))
    if point.concurrency == "max":
        spec = LevelSpec(all_at_once=True, num_requests=point.sim_requests)
    else:
        spec = LevelSpec(concurrency=int(point.concurrency), num_requests=point.sim_requests)
    result = simulate_level(plan.deployment, config, plan.num_kv_blocks, workload, spec, index=0, seed=0,
                            steptime=StepTimeModel(plan.deployment))
    s = summarize_level(result.records, concurrency=None if point.concurrency == "max" else int(point.concurrency))
    if point.metric == "output_tok_s":
        return float(s["output_tok_s"])
    key, stat = point.metric.rsplit("_", 1)
    return float(s[key][stat])


def error_table(points: list[Point] | None = None) -> list[dict]:
    """One row per point: published, predicted, signed error in percent of the published value."""
    rows = []
    for p in points if points is not None else load_points():
        pred = predict(p)
        name = Path(p.model).name.removesuffix(".json") if p.model.endswith(".json") else p.model
        rows.append({"id": p.id, "engine": p.engine, "model": name, "gpu": p.gpu, "tp": p.tp,
                     "weight_dtype": p.weight_dtype or "as shipped", "isl": p.isl, "osl": p.osl,
                     "concurrency": p.concurrency, "requests": p.requests, "sim_requests": p.sim_requests,
                     "metric": p.metric, "published": p.published, "predicted": round(pred, 2),
                     "error_pct": round(100.0 * (pred - p.published) / p.published, 1), "source": p.source_url,
                     "source_title": p.source_title})
    return rows


def median_abs_error_pct(rows: list[dict]) -> float:
    errs = sorted(abs(r["error_pct"]) for r in rows)
    n = len(errs)
    return errs[n // 2] if n % 2 else (errs[n // 2 - 1] + errs[n // 2]) / 2


def render_markdown(rows: list[dict]) -> str:
    """The generated block of docs/validation.md."""
    sources: dict[str, tuple[int, str]] = {}
    for r in rows:
        sources.setdefault(r["source"], (len(sources) + 1, r.get("source_title", "")))
    lines = [TABLE_BEGIN, "",
             "| # | engine | model | GPU x TP | weights | ISL/OSL | C | metric | published | predicted | error | src |",
             "|---|---|---|---|---|---|---|---|---:|---:|---:|---|"]
    for i, r in enumerate(rows, 1):
        load = "max" if r["concurrency"] == "max" else str(r["concurrency"])
        if r["sim_requests"] != r["requests"]:
            load += f" ({r['sim_requests']:,} of {r['requests']:,} req. simulated)"
        lines.append(f"| {i} | {r['engine']} | {r['model']} | {r['gpu']} x{r['tp']} | {r['weight_dtype']} | "
                     f"{r['isl']}/{r['osl']} | {load} | {METRICS[r['metric']]} | {r['published']:,.1f} | "
                     f"{r['predicted']:,.1f} | {r['error_pct']:+.1f}% | [{sources[r['source']][0]}] |")
    errs = [abs(r["error_pct"]) for r in rows]
    within = sum(e <= 25 for e in errs)
    lines += ["", f"{len(rows)} points; median absolute error {median_abs_error_pct(rows):.1f}%; "
                  f"{within} of {len(rows)} within 25%; worst {max(errs):.1f}%.", "", "Sources:", ""]
    lines += [f"[{n}] {title} — <{url}>" + "  " for url, (n, title) in sources.items()]
    lines += ["", TABLE_END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - a maintenance entry point
    import sys

    args = sys.argv[1:] if argv is None else argv
    rows = error_table()
    block = render_markdown(rows)
    if "--write" in args:
        doc_path = Path(__file__).resolve().parents[2] / "docs" / "validation.md"
        text = doc_path.read_text()
        start, end = text.index(TABLE_BEGIN), text.index(TABLE_END) + len(TABLE_END)
        doc_path.write_text(text[:start] + block + text[end:])
    print(block)
    if "--json" in args:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
