"""Investigation, not product code: what paces GPUStack's short-prompt vLLM runs (1,000 requests of 128 tokens in,
4 out, all sent at once, `vllm bench serve --backend openai-chat`)? Nothing here changes the simulator.

    PYTHONPATH=src python bench/short_prompt_pacing.py

For each run (validation points gpustack-vllm-*-128-4-*) it prints the published mean TTFT, the run's duration (4,000
output tokens / output tok/s) and mean TPOT, then three ways the simulator could be made to miss them:

1. front: requests reach the engine one every X seconds (a serial per-request front end: the API server's chat
   template, tokenization and add_request), X = 2, 5, 10, 20 ms. TTFT is timed from the client's send (time 0).
2. tokens: every prompt longer than 128 tokens (more engine work per request: template tokens, re-tokenization).
3. dead time: the published figures read as a dead time D before the engine's run, then a run of E seconds whose
   first tokens come out evenly (mean TTFT = D + E/2, duration = D + E), so E = 2 (duration - TTFT), set beside the
   simulator's own run length.

What the rows show (the report that came with this script gives the figures): a paced front end stretches the
duration only by shrinking the steps (TPOT falls 2-30x, where the published TPOT equals the simulator's full-budget
step within 3% but for gpt-oss-120b), and more prompt tokens keep mean TTFT at half the duration (published: 0.51-0.88
of it). A dead time before a run the simulator prices right fits both: E equals the simulated run within 1% for
gpt-oss-20b on H100 and Qwen3-235B-A22B on A100 (-8% on H100, -20% DeepSeek), D = 0.1-2.0 s for gpt-oss, 5.3 and 7.9 s
for Qwen3-235B-A22B, 16.7 s for DeepSeek-R1. The published distributions say the same: DeepSeek-R1's run (22.07 s) has
median TTFT 18.99 s and P99 21.44 s; Qwen3-235B-A22B's (8.83 s) median 6.88 s, P99 8.72 s. GPUStack's other vLLM
deployment of Qwen3 on the same H100 host (FP8, TP 4, 16,384 tokens a step: duration 6.11 s, mean TTFT 5.62 s, median
5.53 s, P99 5.80 s) gives D = 5.13 s against the baseline's 5.25 s: the dead time follows the host and the model's
chat template, not the GPU work (SAME_HOST below).

A candidate read in vLLM 0.11.0's source (modelled since by `kneecap simulate --endpoint chat`, sim/frontend.py; the
validation points of these pages run with it, this script without it: the engine's run alone): /v1/chat/completions
renders a model's Jinja chat template on the API server's event loop before the request first waits
(entrypoints/openai/serving_engine.py _preprocess_chat: apply_hf_chat_template, then the tokenizer's await; the awaits
before it return at once for a text-only request to the served model), and 0.11.0's apply_hf_chat_template calls
resolve_chat_template_kwargs (entrypoints/chat_utils.py:1575-1599), which builds a jinja2 environment and parses the
whole template on every request, uncached (0.11.1-0.12.0 and 0.32.0 cache it, _cached_resolve_chat_template_kwargs;
0.10.2 has no such call). Requests sent together therefore all pass that synchronous part before any reaches the
engine. vllm-project/vllm#20065 measured the same kind of per-request template walk (_detect_content_format, cached
since) as "6-8 seconds delay before prompts actually are started to process" for 1,000 requests. gpt-oss renders with
openai-harmony instead (serving_chat.py use_harmony), which fits its small D. bench/chat_template_parse.py times that
per-request parse for a given template file.
"""

from __future__ import annotations

import dataclasses

from kneecap import validation as V
from kneecap.levels import SweepLevel
from kneecap.sim.level_driver import PlannedLevelDriver, SimulateOptions
from kneecap.sim.sweep import LevelSpec
from kneecap.sweep.door import run_one_level
from kneecap.workload import RequestClass, RequestSpec, Workload


def _records(point, *, isl: int, gap_s: float = 0.0):
    sim = V.sim_deployment(dataclasses.replace(point, endpoint="completions"))  # the engine alone, no front end
    n = point.sim_requests
    wl = Workload(classes=(RequestClass(input=V._lengths(isl, None), output=V._lengths(point.osl, None)),))
    if gap_s:
        rows = tuple(
            (
                i * gap_s,
                RequestSpec(index=i, request_id=f"r{i}", class_name="c", input_tokens=isl, output_tokens=point.osl),
            )
            for i in range(n)
        )
        spec, kind, value = LevelSpec(rate=1 / gap_s, num_requests=n, schedule=rows), "rate", 1 / gap_s
    else:
        spec, kind, value = LevelSpec(all_at_once=True, num_requests=n), "concurrency", "max"
    driver = PlannedLevelDriver(sim, wl, spec, seed=0)
    _, recs = run_one_level(
        SimulateOptions(kind=kind, levels=(value,), requests=n),
        driver,
        SweepLevel(index=0, value=value, num_requests=n, num_warmup=0, first_index=0),
    )
    return recs


def _figures(recs, osl: int) -> tuple[float, float, float]:
    """(mean TTFT s from the client's send at 0, duration s, mean TPOT ms)."""
    ttft = sum(r.first_token_at for r in recs) / len(recs)
    duration = max(r.end_at for r in recs)
    tpot = 1e3 * sum((r.end_at - r.first_token_at) / (osl - 1) for r in recs) / len(recs)
    return ttft, duration, tpot


# GPUStack performance lab, Qwen3-235B-A22B on H100 (docs/performance-lab/qwen3-235b-a22b/h100.md, the page of the
# validation points), "Optimized benchmark results", random 128 input: vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8
# -tp 4 --max-num-batched-tokens 16384 on the same host as the baseline: (duration s, mean TTFT s)
SAME_HOST = {"qwen3-235b-a22b-h100 fp8 tp4 16384": (6.11, 5.62151)}


def main() -> None:
    runs: dict[str, dict] = {}
    for p in V.load_points():
        if p.id.startswith("gpustack-vllm") and "-128-4-" in p.id:
            runs.setdefault(p.id.rsplit("-128-4-", 1)[0].removeprefix("gpustack-vllm-"), {})[p.metric] = p
    for name, metrics in runs.items():
        p = next(iter(metrics.values()))
        ttft = metrics["ttft_ms_mean"].published / 1e3
        duration = p.requests * p.osl / metrics["output_tok_s"].published
        tpot = metrics["tpot_ms_mean"].published if "tpot_ms_mean" in metrics else float("nan")
        sim = _figures(_records(p, isl=p.isl), p.osl)
        print(
            f"{name} (vLLM {p.engine_version}): published TTFT {ttft:.2f} s, duration {duration:.1f} s, "
            f"TPOT {tpot:.0f} ms; simulated {sim[0]:.2f} / {sim[1]:.1f} / {sim[2]:.0f}"
        )
        front = [
            f"{g * 1e3:g} ms: " + "%.2f / %.1f / %.0f" % _figures(_records(p, isl=p.isl, gap_s=g), p.osl)
            for g in (0.002, 0.005, 0.01, 0.02)
        ]
        print("  front, one request every", " | ".join(front))
        longer = [f"{isl}: " + "%.2f / %.1f / %.0f" % _figures(_records(p, isl=isl), p.osl) for isl in (256, 384, 512)]
        print("  tokens, prompts of", " | ".join(longer))
        run_s = 2 * (duration - ttft)
        print(
            f"  dead time: D = {duration - run_s:.2f} s, E = {run_s:.2f} s against the simulated run {sim[1]:.2f} s "
            f"({100 * (run_s / sim[1] - 1):+.0f}%); published TTFT / duration {ttft / duration:.2f}, "
            f"simulated {sim[0] / sim[1]:.2f}"
        )
    for name, (duration, ttft) in SAME_HOST.items():
        run_s = 2 * (duration - ttft)
        print(f"{name} (published only): D = {duration - run_s:.2f} s, E = {run_s:.2f} s")


if __name__ == "__main__":
    main()
