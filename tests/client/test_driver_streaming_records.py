"""Driver options used by long runs and load plans: records streamed only (flat memory), on/off bursts."""

from __future__ import annotations

import time

import pytest

from kneecap.client.driver import ClientConfig, run_closed_loop, run_open_loop, run_sync
from kneecap.workload import Workload, make_requests
from servers.scripted import start_scripted_server


@pytest.fixture(scope="module")
def server():
    url, srv = start_scripted_server(ttft_s=0.002, itl_s=0.001)
    yield url
    srv.stop()


def test_keep_records_false_streams_every_record_and_keeps_none(server):
    specs = make_requests(Workload.fixed(8, 4), 30, seed=1)
    got = []
    cfg = ClientConfig(base_url=server, model="m")
    run = run_sync(
        run_closed_loop(cfg, specs, 4, level=0, epoch=time.perf_counter(), on_record=got.append, keep_records=False)
    )
    assert run.records == []
    assert len(got) == 30 and all(r.ok and r.num_output_tokens == 4 for r in got)


def test_open_loop_on_off_bursts_send_only_inside_on_windows(server):
    specs = make_requests(Workload.fixed(8, 2), 24, seed=2)
    got = []
    on_s, off_s = 0.3, 0.6
    cfg = ClientConfig(base_url=server, model="m")
    run = run_sync(
        run_open_loop(
            cfg,
            specs,
            40.0,
            seed=3,
            level=0,
            epoch=time.perf_counter(),
            on_record=got.append,
            on_s=on_s,
            off_s=off_s,
            keep_records=False,
        )
    )
    assert len(got) == 24 and all(r.ok for r in got)
    t0 = run.started_at
    phases = [(r.scheduled_at - t0) % (on_s + off_s) for r in got]
    assert max(phases) <= on_s + 1e-6  # intended send times fall inside the bursts
    assert len(run.schedule_lag_s) == 24  # schedule lag still measured without keeping records
