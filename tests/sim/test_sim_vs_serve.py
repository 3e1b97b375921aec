"""`kneecap simulate` against `kneecap serve` + `kneecap bench` on the same flags: the virtual-clock closed loop
(a slot's next request arrives one client turnaround after its response ends, later by its place among the
responses its step ended, so it misses the step in flight and joins the step after) agrees with the same engine
run in real time behind HTTP within 5% on output tok/s, TTFT p50 and p99 and TPOT p50, at C=4, 32 and 64
(TTFT p50 at C=4 within 25%: see the test), without a warmup and with C warmup requests (bench runs them as
their own phase, at min(C, warmup) in flight, to their end, then the level's C at once on the warm server; the
simulator does the same on one engine). The server is a real subprocess on a free 127.0.0.1 port, stopped by PID.

The server runs at --time-scale 8 (each engine step takes eight times its simulated length on the wall clock) and
bench's times are read back in simulated seconds. At real time on a busy 2-core machine the HTTP path cannot keep
an 8B-on-H100 engine's cadence at C=64 (64 streams x one SSE chunk per 25 ms step): measured, the server delivered
a step's tokens 12 ms late at the median and 107 ms at p99, the client read 2-3 tokens per chunk, the next wave's
requests landed one or two steps late and TTFT p50 came out 1.5x the simulated one. That lag is the machine's,
not an engine's; with eight times the wall time per step what is left is the engine and its client."""

from __future__ import annotations

import json

import pytest

from kneecap.cli.demo import start_server, stop_server

ARGS = ["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192"]
TIME_SCALE = 8.0  # wall seconds per simulated second on the server
REQUESTS = {4: 24, 32: 128, 64: 192}  # six, four and three waves: the level's p99 is its first wave's slowest
# (concurrency, warmup requests): with a warmup, bench's level runs in two phases (the warmup to its end, then C
# at once), and the measured first wave's p99 is what a simulator running one continuous loop got wrong
CASES = [(4, 0), (32, 0), (64, 0), (32, 32), (64, 64)]


@pytest.mark.parametrize("concurrency,warmup", CASES, ids=[f"C{c}-warmup{w}" for c, w in CASES])
def test_simulate_agrees_with_serve_and_bench(cli, tmp_path, concurrency, warmup):
    n = REQUESTS[concurrency]
    load = ["--isl", "1024", "--osl", "64", "--concurrency", str(concurrency), "--requests", str(n),
            "--warmup", str(warmup)]
    proc, url = start_server([*ARGS, "--time-scale", str(TIME_SCALE)])
    try:
        served = cli("bench", "--base-url", url, *load, "--out", str(tmp_path / "bench"), "--json", "--no-report")
    finally:
        assert stop_server(proc) == 0
    assert served.code == 0, served.stderr
    simulated = cli("simulate", *ARGS, *load, "--out", str(tmp_path / "sim"), "--json", "--no-report")
    assert simulated.code == 0, simulated.stderr
    real, sim = json.loads(served.stdout)["levels"][0], json.loads(simulated.stdout)["levels"][0]
    assert real["completed"] == sim["completed"] == n and real["warmup_excluded"] == sim["warmup_excluded"] == warmup
    # bench measured wall seconds: in simulated seconds, times are 1/TIME_SCALE and rates TIME_SCALE times theirs
    got = {"output tok/s": real["output_tok_s"] * TIME_SCALE, "TTFT p50": real["ttft_ms"]["p50"] / TIME_SCALE,
           "TTFT p99": real["ttft_ms"]["p99"] / TIME_SCALE, "TPOT p50": real["tpot_ms"]["p50"] / TIME_SCALE}
    want = {"output tok/s": sim["output_tok_s"], "TTFT p50": sim["ttft_ms"]["p50"], "TTFT p99": sim["ttft_ms"]["p99"],
            "TPOT p50": sim["tpot_ms"]["p50"]}
    off = {k: got[k] / want[k] - 1 for k in got}
    # At C=4 TTFT p50 sits on a step boundary: of a wave's four refills, the first is prefilled alone (~64 ms
    # served) and the rest join the next step (~80 ms), so the median flips between the two when one refill lands
    # a little earlier or later behind HTTP (a clean CI run measured -19.6% with p99 +0.7% and throughput -0.1%).
    # It is held to 25% there; every other figure, and p50 at C=32 and 64, to 5%.
    bound = {k: (0.25 if (concurrency == 4 and k == "TTFT p50") else 0.05) for k in got}
    assert all(abs(v) <= bound[k] for k, v in off.items()), (
        f"C={concurrency}, warmup {warmup}: served vs simulated " + ", ".join(f"{k} {got[k]:.1f} vs {want[k]:.1f} ({off[k]:+.1%})"
                                                              for k in got))


def test_a_wave_back_to_an_idle_engine_arrives_in_turn():
    """Equal requests end in the same step; their clients send again rank x delivery spread + turnaround later,
    so the engine, idle by then, starts on the first request alone and the others join the step after. With no
    spread the whole wave arrives at once and is prefilled in one step."""
    from simkit import deployment, sim_of

    from kneecap.sim.config import EngineConfig
    from kneecap.sim.sweep import CLIENT_TURNAROUND_S, DELIVERY_SPREAD_S, LevelSpec, simulate_level
    from kneecap.workload import Workload

    d, cfg = deployment(), EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096)
    level = LevelSpec(concurrency=4, num_requests=8)
    spread = simulate_level(sim_of(d, cfg, 20000), Workload.fixed(400, 20), level)  # the default spread
    lockstep = simulate_level(sim_of(d, cfg, 20000), Workload.fixed(400, 20), level, delivery_spread_s=0.0)
    wave1_end = max(r.end_at for r in spread.records[:4])
    second = sorted(r.sent_at for r in spread.records if r.sent_at > 0)
    assert second == pytest.approx([wave1_end + k * DELIVERY_SPREAD_S + CLIENT_TURNAROUND_S for k in range(4)])
    firsts = sorted(r.first_token_at for r in spread.records if r.sent_at > 0)
    assert firsts[0] < firsts[1] == firsts[3]  # the first alone, then the other three in one step
    assert len({r.first_token_at for r in lockstep.records if r.sent_at > 0}) == 1
