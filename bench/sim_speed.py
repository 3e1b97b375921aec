"""How fast is the simulator, and how do its speed and predictions compare with Vidur on one shared trace?

    .venv/bin/python bench/sim_speed.py                 # the issue's case: 10,000 x 1000/1000 at C=256,
                                                        # llama-3.1-70b on 8x H100 (TP8), fast path on
    .venv/bin/python bench/sim_speed.py --exact-too     # also time the step-by-step path (no event skipping)
    .venv/bin/python bench/sim_speed.py --vidur         # also try Vidur (pip `vidur`) in bench/.peers/vidur-venv

Vidur is installed with `python3 -m venv bench/.peers/vidur-venv && bench/.peers/vidur-venv/bin/pip install vidur`.
Both simulators get the same trace (arrival time, prompt and output tokens per request: a CSV in Vidur's
trace format, built from kneecap.workload) and the results are printed as ratios kneecap / Vidur.
Prints one JSON document; wall times are this machine's (2 cores, shared), not a benchmark of record.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VIDUR_PY = ROOT / ".peers" / "vidur-venv" / "bin" / "python"


def deployment_70b_h100x8():
    from kneecap.deployment import Deployment
    from kneecap.hardware import get_gpu
    from kneecap.model import load_model
    from kneecap.plan.ledger import build_plan

    d = Deployment(model=load_model("llama-3.1-70b"), gpu=get_gpu("h100-sxm"), tp=8)
    return d, build_plan(d, context=4096)


def time_kneecap(requests: int, concurrency: int, isl: int, osl: int, fast_path: bool) -> dict:
    from kneecap.metrics.summarize import summarize_level
    from kneecap.sim.config import EngineConfig
    from kneecap.sim.sweep import LevelSpec, simulate_level
    from kneecap.workload import Workload

    d, plan = deployment_70b_h100x8()
    config = EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192)
    t0 = time.perf_counter()
    res = simulate_level(d, config, plan.num_kv_blocks, Workload.fixed(isl, osl),
                         LevelSpec(concurrency=concurrency, num_requests=requests), fast_path=fast_path)
    sim_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    level = summarize_level(res.records, concurrency=concurrency)
    return {"fast_path": fast_path, "requests": requests, "concurrency": concurrency, "isl": isl, "osl": osl,
            "wall_simulate_s": round(sim_s, 3), "wall_summarize_s": round(time.perf_counter() - t1, 3),
            "engine_steps": res.server_metrics["num_steps"], "virtual_s": round(res.end_s, 3),
            "output_tok_s": round(level["output_tok_s"], 1), "ttft_p50_ms": round(level["ttft_ms"]["p50"], 2),
            "tpot_p50_ms": round(level["tpot_ms"]["p50"], 3)}


def shared_trace(n: int, rate: float, isl: int, osl: int, seed: int = 0) -> list[tuple[float, int, int]]:
    from kneecap.workload import Workload, arrival_offsets, make_requests

    specs = make_requests(Workload.fixed(isl, osl), n, seed)
    return [(t, s.input_tokens, s.output_tokens) for t, s in zip(arrival_offsets(rate, n, 1.0, seed), specs)]


def kneecap_on_trace(trace) -> dict:
    import math

    from kneecap.metrics.summarize import summarize_level
    from kneecap.sim.config import EngineConfig
    from kneecap.sim.engine import Engine
    from kneecap.workload import RequestSpec

    d, plan = deployment_70b_h100x8()
    engine = Engine(d, EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192), plan.num_kv_blocks)
    t0 = time.perf_counter()
    records, t, k = [], 0.0, 0
    while k < len(trace) or engine.has_work:
        while k < len(trace) and trace[k][0] <= t:
            at, isl, osl = trace[k]
            engine.add_request(RequestSpec(index=k, request_id=f"t{k}", class_name="trace", input_tokens=isl,
                                           output_tokens=osl), at)
            k += 1
        if not engine.has_work:
            t = trace[k][0]
            continue
        out = engine.step(t, until=trace[k][0] if k < len(trace) else math.inf, max_steps=1 << 20)
        t = out.ended_at
        records.extend(out.finished)
    wall = time.perf_counter() - t0
    level = summarize_level(records, rate=None, concurrency=None)
    return {"wall_s": round(wall, 3), "output_tok_s": level["output_tok_s"], "ttft_p50_ms": level["ttft_ms"]["p50"],
            "tpot_p50_ms": level["tpot_ms"]["p50"], "e2e_p50_ms": level["e2e_ms"]["p50"]}


def vidur_on_trace(trace, workdir: Path) -> dict:
    """Run Vidur (vLLM scheduler, Llama-3-70B, H100, TP8) on the same trace; {"error": ...} if it cannot run here."""
    if not VIDUR_PY.exists():
        return {"error": f"no Vidur environment at {VIDUR_PY.parent.parent} (pip install vidur into it first)"}
    workdir.mkdir(parents=True, exist_ok=True)
    csv = workdir / "trace.csv"
    # Vidur's trace_replay format (vidur/request_generator/trace_replay_request_generator.py)
    csv.write_text("Date,Time,PromptTokenCount,CompletionTokenCount\n" +
                   "".join(f"2023-08-21,{a},{p},{o}\n" for a, p, o in trace))
    cmd = [str(VIDUR_PY), "-m", "vidur.main", "--replica_config_model_name", "meta-llama/Llama-3-70B",
           "--replica_config_device", "h100", "--replica_config_tensor_parallel_size", "8",
           "--request_generator_config_type", "trace_replay", "--trace_request_generator_config_trace_file", str(csv),
           "--trace_request_generator_config_prefill_scale_factor", "1", "--trace_request_generator_config_decode_scale_factor", "1",
           "--trace_request_generator_config_time_scale_factor", "1", "--trace_request_generator_config_max_tokens", "4096",
           "--replica_scheduler_config_type", "vllm", "--vllm_scheduler_config_batch_size_cap", "256",
           "--vllm_scheduler_config_max_tokens_in_batch", "8192"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip() and not ln.startswith(" ")]
        return {"error": lines[-1] if lines else f"exit {proc.returncode}", "wall_s": round(wall, 3), "command": cmd}
    return {"wall_s": round(wall, 3), "output_dir": str(workdir),
            "note": "read Vidur's request_metrics.csv under its simulator_output folder for the latency ratios"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--isl", type=int, default=1000)
    ap.add_argument("--osl", type=int, default=1000)
    ap.add_argument("--exact-too", action="store_true", help="also time the step-by-step path")
    ap.add_argument("--vidur", action="store_true", help="compare with Vidur on a shared 1,000-request trace")
    args = ap.parse_args()
    out = {"machine": {"python": sys.version.split()[0]}, "runs": []}
    out["runs"].append(time_kneecap(args.requests, args.concurrency, args.isl, args.osl, fast_path=True))
    if args.exact_too:
        exact = time_kneecap(args.requests, args.concurrency, args.isl, args.osl, fast_path=False)
        out["runs"].append(exact)
        out["fast_path_speedup"] = round(exact["wall_simulate_s"] / out["runs"][0]["wall_simulate_s"], 2)
    if args.vidur:
        trace = shared_trace(1000, 4.0, args.isl, args.osl)
        mine = kneecap_on_trace(trace)
        theirs = vidur_on_trace(trace, ROOT / ".peers" / "vidur-run")
        out["shared_trace"] = {"requests": 1000, "rate": 4.0, "isl": args.isl, "osl": args.osl, "kneecap": mine, "vidur": theirs}
        if "error" not in theirs:
            out["shared_trace"]["speed_ratio_vidur_over_kneecap"] = round(theirs["wall_s"] / mine["wall_s"], 2)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
