"""The driver cuts a level at its first refused key (HTTP 401/403): nothing is sent after it, the requests
in flight are cancelled (recorded "cancelled"), the records that finished are kept, and the level's run says
which refusal cut it. Closed loop, open loop and multi-turn conversations, against the scripted server that
accepts the key for its first N completion requests (each accepted one then streams for ~2 s: far longer
than a cut takes) and refuses every later one at once."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from kneecap.client.driver import ClientConfig, run_closed_loop, run_conversations, run_open_loop, run_sync
from kneecap.workload import LengthDist, Workload, make_requests
from kneecap.workload.multiturn import expected_turns, plan_conversations
from servers.scripted import start_scripted_server

BOUND_S = 30
ITL_S = 0.1
OSL = 20  # an accepted stream lasts OSL x ITL_S = 2 s


def _served(accepted: int, status: int = 401):
    return start_scripted_server(auth_fail_after=accepted, auth_fail_status=status, itl_s=ITL_S)


def _kinds(records) -> list:
    return sorted(r.error_kind or r.status for r in records)


@pytest.mark.parametrize("status", [401, 403])
def test_closed_loop_cut_at_the_first_refusal_cancels_the_streams_in_flight(status):
    url, srv = _served(
        3, status
    )  # C=4: the first 4 go out together, 3 accepted, the 4th refused (403: a forbidden key)
    records = []
    try:
        cfg = ClientConfig(base_url=url, model="m")
        run = run_sync(
            asyncio.wait_for(
                run_closed_loop(
                    cfg,
                    make_requests(Workload.fixed(8, OSL), 12),
                    4,
                    level=0,
                    epoch=time.perf_counter(),
                    on_record=records.append,
                ),
                BOUND_S,
            )
        )
        log = srv.log()
    finally:
        srv.stop()
    assert run.cut == f"http_{status}"
    assert _kinds(records) == ["cancelled"] * 3 + [f"http_{status}"], _kinds(records)
    assert run.duration_s < OSL * ITL_S  # the accepted streams were not waited for
    refused = [e for e in log if e.get("status") == status]
    assert len(refused) == 1  # any request sent after the cut would have been refused and logged


def test_open_loop_cut_sends_nothing_after_the_refusal():
    url, srv = _served(2)  # sends at 0, 0.05 s (accepted, streaming), 0.1 s (refused), then 0.5, 0.9, 1.3 s
    records = []
    try:
        cfg = ClientConfig(base_url=url, model="m")
        specs = make_requests(Workload.fixed(8, OSL), 6)
        run = run_sync(
            asyncio.wait_for(
                run_open_loop(
                    cfg,
                    specs,
                    1.0,
                    level=0,
                    epoch=time.perf_counter(),
                    on_record=records.append,
                    offsets=[0.0, 0.05, 0.1, 0.5, 0.9, 1.3],
                ),
                BOUND_S,
            )
        )
        log = srv.log()
    finally:
        srv.stop()
    assert run.cut == "http_401"
    assert _kinds(records) == ["cancelled", "cancelled", "http_401"], _kinds(records)
    assert run.duration_s < 0.5  # the scheduler stopped too: it did not wait for the next send time
    assert len([e for e in log if e.get("status") == 401]) == 1


def test_conversations_cut_at_the_first_refusal():
    url, srv = _served(1)  # 2 users: one first turn accepted, the other refused
    records = []
    plan = plan_conversations(6, 2, LengthDist.fixed(8), LengthDist.fixed(OSL))
    specs = [
        dataclasses.replace(t.spec, index=k, request_id=f"r{k}")
        for k, t in enumerate(t for conv in plan.conversations for t in expected_turns(plan, conv))
    ]
    try:
        cfg = ClientConfig(base_url=url, model="m", endpoint="chat")
        run = run_sync(
            asyncio.wait_for(
                run_conversations(
                    cfg,
                    plan.conversations,
                    2,
                    specs=specs,
                    level=0,
                    epoch=time.perf_counter(),
                    on_record=records.append,
                ),
                BOUND_S,
            )
        )
        log = srv.log()
    finally:
        srv.stop()
    assert run.cut == "http_401"
    assert _kinds(records) == ["cancelled", "http_401"], _kinds(records)
    assert len([e for e in log if e.get("status") == 401]) == 1


def test_a_level_without_refusals_is_not_cut():
    url, srv = _served(100)
    records = []
    try:
        cfg = ClientConfig(base_url=url, model="m", extra_body={"scripted": {"itl_s": 0.001}})
        run = run_sync(
            asyncio.wait_for(
                run_closed_loop(
                    cfg,
                    make_requests(Workload.fixed(8, 4), 6),
                    2,
                    level=0,
                    epoch=time.perf_counter(),
                    on_record=records.append,
                ),
                BOUND_S,
            )
        )
    finally:
        srv.stop()
    assert run.cut is None and len(records) == 6 and all(r.ok for r in records)


def _shared_status(monkeypatch, value: int = 0):
    """This process as a --workers process: its levels share a refusal status with the other workers'."""
    import multiprocessing

    from kneecap.client.driver import AuthCut

    shared = multiprocessing.get_context("spawn").Value("i", value)
    monkeypatch.setattr(AuthCut, "shared", shared)
    return shared


def test_a_refusal_written_to_the_shared_status_by_another_worker_cuts_this_level_in_flight(monkeypatch):
    # another worker's refusal (its status written to the shared value) cuts this process's level too: its
    # accepted streams are cancelled in flight and nothing more is sent
    import threading

    url, srv = _served(100)  # this server never refuses: only the shared status can cut the level
    records = []
    try:
        cfg = ClientConfig(base_url=url, model="m")
        # first a request on its own, so that the level below sends its first requests at once (imports paid)
        run_sync(
            run_closed_loop(
                cfg,
                make_requests(Workload.fixed(8, 1), 1),
                1,
                level=0,
                epoch=time.perf_counter(),
                on_record=lambda r: None,
            )
        )
        shared = _shared_status(monkeypatch)
        timer = threading.Timer(0.5, lambda: setattr(shared, "value", 403))  # the 2 s streams are in flight then
        timer.start()
        run = run_sync(
            asyncio.wait_for(
                run_closed_loop(
                    cfg,
                    make_requests(Workload.fixed(8, OSL), 12),
                    3,
                    level=1,
                    epoch=time.perf_counter(),
                    on_record=records.append,
                ),
                BOUND_S,
            )
        )
        timer.cancel()
        log = srv.log()
    finally:
        srv.stop()
    assert run.cut == "http_403"
    assert _kinds(records) == ["cancelled"] * 3, _kinds(records)  # the 3 first streams, none finished
    assert run.duration_s < OSL * ITL_S
    assert len([e for e in log if e["path"].endswith("completions")]) == 1  # the lone request; the 3 never ended


def test_a_level_starting_after_another_workers_refusal_sends_nothing(monkeypatch):
    _shared_status(monkeypatch, 401)
    url, srv = _served(100)
    records = []
    try:
        cfg = ClientConfig(base_url=url, model="m")
        run = run_sync(
            asyncio.wait_for(
                run_closed_loop(
                    cfg,
                    make_requests(Workload.fixed(8, OSL), 6),
                    2,
                    level=0,
                    epoch=time.perf_counter(),
                    on_record=records.append,
                ),
                BOUND_S,
            )
        )
        log = srv.log()
    finally:
        srv.stop()
    assert run.cut == "http_401" and records == []
    assert not [e for e in log if e["path"].endswith("completions")]


def test_this_workers_refusal_is_written_to_the_shared_status(monkeypatch):
    shared = _shared_status(monkeypatch)
    url, srv = _served(1)  # C=2: one accepted, one refused
    records = []
    try:
        cfg = ClientConfig(base_url=url, model="m")
        run = run_sync(
            asyncio.wait_for(
                run_closed_loop(
                    cfg,
                    make_requests(Workload.fixed(8, OSL), 6),
                    2,
                    level=0,
                    epoch=time.perf_counter(),
                    on_record=records.append,
                ),
                BOUND_S,
            )
        )
    finally:
        srv.stop()
    assert run.cut == "http_401" and shared.value == 401
    assert _kinds(records) == ["cancelled", "http_401"], _kinds(records)
