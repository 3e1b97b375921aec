"""`kneecap simulate` against `kneecap serve` + `kneecap bench` on the same flags: the virtual-clock closed loop
(a slot's next request arrives one client turnaround after its response ends, later by its place among the
responses its step ended, so it misses the step in flight and joins the step after) agrees with the same engine
run in real time behind HTTP within 5% on output tok/s, TTFT p50 and p99 and TPOT p50, at C=4, 32 and 64,
without a warmup and with C warmup requests (bench runs them as
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
import math

import pytest

from kneecap.cli.serve_process import start_server, stop_server

ARGS = ["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192"]
TIME_SCALE = 8.0  # wall seconds per simulated second on the server
REQUESTS = {4: 24, 32: 128, 64: 192}  # six, four and three waves: the level's p99 is its first wave's slowest
# (concurrency, warmup requests): with a warmup, bench's level runs in two phases (the warmup to its end, then C
# at once), and the measured first wave's p99 is what a simulator running one continuous loop got wrong
CASES = [(4, 0), (32, 0), (64, 0), (32, 32), (64, 64)]


@pytest.mark.parametrize("concurrency,warmup", CASES, ids=[f"C{c}-warmup{w}" for c, w in CASES])
def test_simulate_agrees_with_serve_and_bench(cli, tmp_path, concurrency, warmup):
    n = REQUESTS[concurrency]
    load = [
        "--isl",
        "1024",
        "--osl",
        "64",
        "--concurrency",
        str(concurrency),
        "--requests",
        str(n),
        "--warmup",
        str(warmup),
    ]
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
    got = {
        "output tok/s": real["output_tok_s"] * TIME_SCALE,
        "TTFT p50": real["ttft_ms"]["p50"] / TIME_SCALE,
        "TTFT p99": real["ttft_ms"]["p99"] / TIME_SCALE,
        "TPOT p50": real["tpot_ms"]["p50"] / TIME_SCALE,
    }
    want = {
        "output tok/s": sim["output_tok_s"],
        "TTFT p50": sim["ttft_ms"]["p50"],
        "TTFT p99": sim["ttft_ms"]["p99"],
        "TPOT p50": sim["tpot_ms"]["p50"],
    }
    off = {k: got[k] / want[k] - 1 for k in got}
    # At C=4 the median is set by how a wave splits: the requests that end a step early are refilled during the
    # others' last step and prefilled together (a wave of 1 + 3 gives 6 of 24 requests at ~30 ms and p50 ~80 ms;
    # 2 + 2 gives 12 at ~48 ms and p50 ~64 ms), and the split of the first wave holds for every later one. Both
    # engines now take a burst up the same way (test_a_burst_reaching_an_idle_served_engine_is_taken_up_as_
    # simulated), so the split, and p50, agree.
    assert all(abs(v) <= 0.05 for v in off.values()), (
        f"C={concurrency}, warmup {warmup}: served vs simulated "
        + ", ".join(f"{k} {got[k]:.1f} vs {want[k]:.1f} ({off[k]:+.1%})" for k in got)
    )


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


def test_a_burst_reaching_an_idle_served_engine_is_taken_up_as_simulated():
    """Two requests that reach `kneecap serve` in one event-loop turn, before its engine task runs: the served
    engine starts its step at the first one's arrival on the virtual clock, with it alone, and the second joins
    the step after, exactly as the simulated engine runs the same two arrivals. (Before, the step started when
    the event loop got round to the engine task and took both, so at C=4 how many of a wave's requests shared
    the first prefill depended on the host, and that split held for every later wave.)"""
    import asyncio
    import time

    from simkit import deployment, sim_of

    from kneecap.serve.realtime import RealtimeEngine
    from kneecap.sim.config import EngineConfig
    from kneecap.sim.sweep import drive
    from kneecap.workload import RequestSpec

    sim = sim_of(deployment(), EngineConfig(max_num_seqs=8, max_num_batched_tokens=8192), 20000)
    served: dict[str, object] = {}

    async def serve_two():
        rt = RealtimeEngine(sim, time_scale=1.0)
        step = rt.engine.step

        def step_and_keep(*args, **kwargs):
            out = step(*args, **kwargs)
            if out is not None:
                served.update({r.request_id: r for r in out.finished})
            return out

        rt.engine.step = step_and_keep
        rt.start()
        await asyncio.sleep(0.05)  # the engine task is idle, waiting for an arrival
        first = rt.submit(4000, 4)  # a 12 ms prefill on this engine
        spin_until = time.monotonic() + 0.001
        while time.monotonic() < spin_until:  # 1 ms later, without yielding to the engine task
            pass
        second = rt.submit(4000, 4)
        while not (first.done and second.done):
            await asyncio.sleep(0.005)
        await rt.stop()

    asyncio.run(serve_two())
    got = [served[f"cmpl-{i}"] for i in range(2)]
    assert got[0].first_token_at < got[1].first_token_at  # the second was not in the first one's prefill
    # the same two arrivals on the simulator's virtual clock
    engine = sim.new_engine()
    arrivals = [
        (
            r.sent_at,
            RequestSpec(index=i, request_id=r.request_id, class_name="serve", input_tokens=4000, output_tokens=4),
        )
        for i, r in enumerate(got)
    ]
    want: dict[str, object] = {}

    def due(t):
        while arrivals and arrivals[0][0] <= t:
            at, spec = arrivals.pop(0)
            engine.add_request(spec, at)
        return arrivals[0][0] if arrivals else math.inf

    assert drive(engine, due, lambda t, finished: want.update({r.request_id: r for r in finished}))
    for rec in got:
        assert (rec.first_token_at, rec.end_at) == pytest.approx(
            (want[rec.request_id].first_token_at, want[rec.request_id].end_at), abs=1e-9
        )


def test_client_turnaround_flag_sets_when_a_closed_loop_sends_again(cli, tmp_path):
    """--client-turnaround-ms: a slot's next request goes that long after its previous response's end (C=1, so one
    response per step and no delivery spread); the default is the simulator's own figure; a bad value is one
    line naming the flag, nothing run."""
    from kneecap.sim.sweep import CLIENT_TURNAROUND_S

    load = [*ARGS, "--isl", "1024", "--osl", "16", "--concurrency", "1", "--requests", "5", "--no-report", "--quiet"]
    gaps = {}
    for name, flag in (("default", []), ("remote", ["--client-turnaround-ms", "20"])):
        res = cli("simulate", *load, *flag, "--out", str(tmp_path / name))
        assert res.code == 0, res.stderr
        rows = sorted(
            (json.loads(line) for line in (tmp_path / name / "requests.jsonl").read_text().splitlines()),
            key=lambda r: r["sent_at"],
        )
        gaps[name] = [b["sent_at"] - a["end_at"] for a, b in zip(rows, rows[1:])]
        ttft = [b["first_token_at"] - b["sent_at"] for b in rows]
        assert ttft == pytest.approx([ttft[0]] * 5, abs=1e-12)  # the engine is idle at every send: the same prefill
    assert gaps["default"] == pytest.approx([CLIENT_TURNAROUND_S] * 4, abs=1e-12)
    assert gaps["remote"] == pytest.approx([0.020] * 4, abs=1e-12)
    for bad in ("-1", "nan", "inf"):
        res = cli("simulate", *load, "--client-turnaround-ms", bad, "--out", str(tmp_path / "bad"))
        assert res.code != 0 and "--client-turnaround-ms" in res.stderr and len(res.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "bad" / "summary.json").exists()
