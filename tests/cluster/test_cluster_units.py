"""kneecap.cluster without a cluster: the clock-offset estimate, actor sizing, the lifted client.ray
facts, and the one-line error `--ray` gives when Ray is not installed."""

from __future__ import annotations

import json

import os
import random

import pytest

from kneecap.cluster.clock import estimate_offset
from kneecap.cluster.connect import RayTarget, actors_for
from kneecap.errors import KneecapError


def test_offset_within_half_the_round_trip_of_the_truth():
    rng = random.Random(7)
    true_offset = 123.456  # remote clock runs this far ahead
    samples = []
    t = 10.0
    for _ in range(50):
        out_s, back_s = rng.uniform(50e-6, 5e-3), rng.uniform(50e-6, 5e-3)  # asymmetric delays
        remote = t + out_s + true_offset
        samples.append((t, remote, t + out_s + back_s))
        t += 0.01
    est = estimate_offset(samples)
    assert est.samples == 50
    assert est.rtt_s == min(b - a for a, _, b in samples)
    assert abs(est.offset_s - true_offset) <= est.rtt_s / 2 + 1e-12


def test_offset_symmetric_trip_is_exact_and_bad_input_refused():
    assert estimate_offset([(1.0, 101.5, 2.0)]).offset_s == pytest.approx(100.0)
    with pytest.raises(ValueError):
        estimate_offset([])
    with pytest.raises(ValueError):
        estimate_offset([(2.0, 0.0, 1.0)])


def test_actor_count_one_per_cpu_more_when_a_level_needs_them():
    target = RayTarget("local", streams_per_actor=256)
    assert actors_for(2.0, 64, target) == 2
    assert actors_for(2.0, 1024, target) == 4
    assert actors_for(3.5, None, target) == 3
    assert actors_for(0.5, 10, target) == 1
    assert actors_for(2.0, 10**9, target) == 256
    assert actors_for(8.0, 4096, RayTarget("local", actors=3)) == 3
    for bad in (dict(address=" "), dict(address="auto", streams_per_actor=0), dict(address="auto", actors=0)):
        with pytest.raises(KneecapError):
            RayTarget(**bad)


def test_merge_sums_up_where_actors_ran():
    from kneecap.sweep.level import LevelOutcome
    from kneecap.sweep.workers import merge_outcomes

    outs = [
        LevelOutcome(3, False, {"ray": {"address": "a:1", "actor": 0, "node_id": "n1"}}),
        LevelOutcome(3, False, {"ray": {"address": "a:1", "actor": 1, "node_id": "n2"}}),
        LevelOutcome(2, True, {"lost": True, "ray": {"address": "a:1", "actor": 2, "node_id": "n2"}}),
    ]
    merged = merge_outcomes(outs, 3)
    assert merged["ray"] == {"address": "a:1", "nodes": 2, "actors": 3, "lost_actors": 1}
    assert merged["suspect"] is True and len(merged["per_worker"]) == 3
    assert "ray" not in merge_outcomes([LevelOutcome(1, False, {})], 1)


def test_ray_flag_without_ray_installed_is_one_line_naming_the_extra(cli, tmp_path):
    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named ray (hidden by the test)')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])}
    r = cli(
        "bench",
        "--base-url",
        "http://127.0.0.1:9",
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "1",
        "--ray",
        "auto",
        "--out",
        str(tmp_path / "out"),
        env=env,
    )
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "kneecap[ray]" in lines[0] and "--ray" in lines[0]
    assert not (tmp_path / "out").exists()


def test_grid_configuration_to_simulate_options_and_bad_files(tmp_path):
    from kneecap.cluster.grid import config_args, config_name, load_grid

    cfg = {
        "name": "8b / h100",
        "preset": "llama-3.1-8b",
        "concurrency": [1, 8],
        "prefix-caching": False,
        "trace": True,
        "requests": 40,
        "seed": None,
    }
    assert config_args(cfg, 0) == [
        "--preset",
        "llama-3.1-8b",
        "--concurrency",
        "1,8",
        "--no-prefix-caching",
        "--trace",
        "--requests",
        "40",
    ]
    assert config_name(cfg, 3) == "003-8b-h100" and config_name({}, 12) == "012"
    with pytest.raises(KneecapError, match="sets 'out'"):
        config_args({"out": "x"}, 1)
    (tmp_path / "bad.yaml").write_text("preset: llama-3.1-8b\n")
    (tmp_path / "bad.json").write_text("[{")
    (tmp_path / "strings.yaml").write_text("- llama-3.1-8b\n")
    for name, says in (
        ("bad.yaml", "holds no list of simulate configurations"),
        ("bad.json", "does not parse"),
        ("strings.yaml", "holds no list of simulate configurations"),
        ("missing.yaml", "cannot read"),
    ):
        with pytest.raises(KneecapError, match=says) as e:
            load_grid(tmp_path / name)
        assert "--grid file" in e.value.one_line() and str(tmp_path / name) in e.value.one_line()


def test_grid_here_matches_simulate_one_by_one_and_bad_config_is_one_line(cli, tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(
        '[{"name": "small", "preset": "llama-3.1-8b", "gpu": "h100-sxm", "isl": 128, "osl": 8, '
        '"concurrency": "1,4", "requests": 12}]'
    )
    r = cli("simulate", "--grid", str(grid), "--out", str(tmp_path / "g"), "--quiet")
    assert r.code == 0, r.stderr
    r = cli(
        "simulate",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "128",
        "--osl",
        "8",
        "--concurrency",
        "1,4",
        "--requests",
        "12",
        "--out",
        str(tmp_path / "one"),
        "--quiet",
        "--no-report",
    )
    assert r.code == 0, r.stderr
    assert (tmp_path / "g" / "000-small" / "summary.json").read_bytes() == (
        tmp_path / "one" / "summary.json"
    ).read_bytes()
    grid.write_text('[{"preset": "llama-3.1-8b", "gpu": "no-such-gpu"}]')
    r = cli("simulate", "--grid", str(grid), "--out", str(tmp_path / "bad"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and "grid configuration 0" in lines[0] and "Traceback" not in r.stderr


def test_grid_configurations_run_as_library_calls_not_subprocesses(tmp_path, monkeypatch):
    """The grid calls the simulate command in-process (as its Ray tasks do in theirs): no process is started."""
    import subprocess

    from kneecap.cli.simulate import simulate_in_process
    from kneecap.cluster.grid import run_grid_bytes

    def no_process(*a, **k):
        raise AssertionError("the grid started a process")

    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    config = {"preset": "llama-3.1-8b", "gpu": "h100-sxm", "isl": 128, "osl": 8, "concurrency": "1,4", "requests": 12}
    (blob,) = run_grid_bytes([config], None, simulate=simulate_in_process)
    doc = json.loads(blob)
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4] and doc["kind"] == "simulate"
    code, stderr = simulate_in_process(
        ["--preset", "llama-3.1-8b", "--gpu", "no-such-gpu", "--out", str(tmp_path / "x")]
    )
    assert code == 2 and stderr.startswith("error:") and stderr.count("\n") == 1


def test_unreachable_ray_head_is_one_line_before_anything_is_written(cli, tmp_path):
    pytest.importorskip("ray")
    import socket
    import time

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    r = cli(
        "bench",
        "--base-url",
        "http://127.0.0.1:9",
        "--isl",
        "4",
        "--osl",
        "4",
        "--concurrency",
        "1",
        "--ray",
        f"127.0.0.1:{port}",
        "--out",
        str(tmp_path / "out"),
        timeout=60,
    )
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and "does not answer" in lines[0], r.stderr
    assert time.monotonic() - started < 30 and not (tmp_path / "out").exists()
    grid = tmp_path / "g.json"
    grid.write_text('[{"preset": "llama-3.1-8b"}]')
    r = cli("simulate", "--grid", str(grid), "--ray", "nohostport", "--out", str(tmp_path / "g"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and "HOST:PORT" in lines[0], r.stderr


def test_an_actors_share_is_cut_by_another_actors_refusal_of_its_own_run_only():
    # StreamActor without Ray: its share sees the actor's refused-key status (as AuthCut.shared), a cut names
    # the run it is for (a late one for an earlier run is ignored), and each new share starts uncut
    import threading
    import time

    from kneecap.cluster.streams import StreamActor
    from kneecap.sweep.level import LevelOutcome

    seen = {}
    release = threading.Event()

    def run_fn(setup, task, on_record, *, refused):
        release.wait(10)
        seen[task] = refused.value
        return LevelOutcome(num_records=0)

    def finished(actor, run_id):
        for _ in range(500):
            _, _, result, refused = actor.poll(run_id)
            if result is not None:
                return result, refused
            time.sleep(0.01)
        raise AssertionError("the share did not end")

    actor = StreamActor(setup=None, run_fn=run_fn)
    actor.start(1, "first", time.perf_counter())
    actor.cut(0, 401)  # for an earlier run: ignored
    assert actor.poll(1)[3] == 0
    actor.cut(1, 403)
    actor.cut(1, 401)  # the first refusal stands
    release.set()
    (kind, outcome, _late_s), refused = finished(actor, 1)
    assert (kind, outcome, refused) == ("done", {"num_records": 0, "suspect": False, "client": {}}, 403)
    assert seen["first"] == 403 and actor.poll(0)[3] == 0  # a poll of another run says nothing
    actor.start(2, "second", time.perf_counter())
    assert finished(actor, 2)[1] == 0 and seen["second"] == 0  # a new share starts uncut
