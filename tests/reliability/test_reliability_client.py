"""Client bugs the reliability audit found, pinned with their minimal repro as regression tests."""

from __future__ import annotations

import time

from kneecap.client.driver import Client, ClientConfig, run_sync
from kneecap.workload import Workload, make_requests
from servers.scripted import start_scripted_server


def test_request_after_a_runaway_line_is_not_a_timeout():
    url, srv = start_scripted_server(fault="huge_line", ttft_s=0.0, itl_s=0.002, fault_after_chunks=1)
    try:
        cfg = ClientConfig(base_url=url, model="m", timeout_s=3, stall_timeout_s=3)
        records = []

        async def go():
            async with Client(cfg, tap_bodies=True) as client:
                return await client.run_closed_loop(
                    make_requests(Workload.fixed(16, 8), 6, seed=1), 1, level=0, epoch=t0, on_record=records.append
                )

        t0 = time.perf_counter()
        run_sync(go())
    finally:
        srv.stop()
    assert [r.error_kind for r in records] == ["malformed_sse"] * 6, [r.error_message for r in records]


def test_runaway_line_without_the_body_tap_is_malformed_sse_every_time():
    """The same server through aiohttp's reader: every request is malformed_sse at once (the contrast)."""
    url, srv = start_scripted_server(fault="huge_line", ttft_s=0.0, itl_s=0.002, fault_after_chunks=1)
    try:
        cfg = ClientConfig(base_url=url, model="m", timeout_s=4, stall_timeout_s=4)
        records = []

        async def go():
            async with Client(cfg, tap_bodies=False) as client:
                return await client.run_closed_loop(
                    make_requests(Workload.fixed(16, 8), 3, seed=1), 1, level=0, epoch=t0, on_record=records.append
                )

        t0 = time.perf_counter()
        run_sync(go())
    finally:
        srv.stop()
    assert [r.error_kind for r in records] == ["malformed_sse"] * 3
    assert max(r.end_at - r.sent_at for r in records) < 3
