"""The load schedule (kneecap.workload.load_shape) driven by hand on a fake clock, one test per load shape, and a
check that the simulator and the HTTP client run it instead of a second copy of the shapes."""

from __future__ import annotations

import ast
import heapq
import math
from pathlib import Path

import pytest

from kneecap.workload import RequestSpec
from kneecap.workload.load_shape import MAX_REFUSALS_IN_A_ROW, LoadSchedule

SRC = Path(__file__).resolve().parents[2] / "src" / "kneecap"


def spec(i: int, *, after: tuple[str, ...] = (), think_s: float = 0.0, rid: str | None = None) -> RequestSpec:
    return RequestSpec(
        index=i,
        request_id=rid or f"r{i}",
        class_name="c",
        input_tokens=10,
        output_tokens=5,
        after_ids=after,
        think_s=think_s,
    )


def ids(popped) -> list[str]:
    return [s.request_id for _, s in popped]


def run_fake_server(schedule: LoadSchedule, service_s) -> list[tuple[float, float, str]]:
    """Drive `schedule` on a fake clock against a server that answers each request service_s(spec) after it is
    sent; [(sent, answered, id)] in send order."""
    now, log, out = 0.0, [], []  # out: a heap of (answer time, order, request id, entry in log)
    while True:
        for at, s in schedule.pop_due(now):
            assert at <= now  # never sent before its time
            entry = [at, None, s.request_id]
            log.append(entry)
            heapq.heappush(out, (now + service_s(s), len(log), s.request_id, entry))
        if schedule.done() and not out:
            break
        nxt = min(schedule.next_due_s(), out[0][0] if out else math.inf)
        assert nxt < math.inf, "the schedule waits for nothing"
        now = nxt
        while out and out[0][0] <= now:
            t, _, rid, entry = heapq.heappop(out)
            entry[1] = t
            schedule.answered(rid, True, t)
    return [tuple(e) for e in log]


def test_closed_loop_keeps_c_in_flight_and_sends_a_turnaround_after_each_answer():
    sched = LoadSchedule((spec(i) for i in range(5)), total=5, slots=2, turnaround_s=0.1)
    assert ids(sched.pop_due(0.0)) == ["r0", "r1"]
    assert sched.next_due_s() == math.inf  # nothing until an answer
    sched.answered("r0", True, 1.0)
    assert sched.next_due_s() == pytest.approx(1.1)
    assert sched.pop_due(1.05) == []
    assert [(round(at, 9), s.request_id) for at, s in sched.pop_due(1.1)] == [(1.1, "r2")]
    sched.answered("r1", True, 1.5)
    sched.answered("r2", True, 1.5)
    assert sched.next_due_s() == pytest.approx(1.6)
    assert ids(sched.pop_due(2.0)) == ["r3", "r4"]
    assert sched.done() and sched.sent == 5
    assert sched.pop_due(9.0) == []


def test_closed_loop_in_flight_never_exceeds_its_slots():
    sched = LoadSchedule((spec(i) for i in range(40)), total=40, slots=3)
    log = run_fake_server(sched, lambda s: 0.5 + (s.index % 4) * 0.3)
    assert len(log) == 40
    for sent, _, _ in log:
        assert sum(1 for s, a, _ in log if s <= sent < a) <= 3


def test_a_request_refused_at_once_frees_its_slot_at_the_same_instant_and_a_slot_gives_up():
    sched = LoadSchedule((spec(i) for i in range(10)), slots=1, turnaround_s=0.5, start_s=2.0)
    at, first = sched.pop_next(2.0)
    sched.answered(first.request_id, False, at, refused=True)
    assert sched.next_due_s() == 2.0  # no turnaround: the slot goes again at once
    again = sched.pop_next(2.0)
    assert again[0] == 2.0 and again[1].request_id == "r1"
    endless = LoadSchedule((spec(i) for i in range(5000)), slots=1)
    refused = 0
    while (got := endless.pop_next(0.0)) is not None:
        endless.answered(got[1].request_id, False, 0.0, refused=True)
        refused += 1
    assert refused == MAX_REFUSALS_IN_A_ROW and endless.done()


def test_a_concurrency_ramp_opens_and_closes_each_slot_in_its_window():
    sched = LoadSchedule((spec(i) for i in range(100)), windows=[(0.0, None), (5.0, 10.0)])
    log = run_fake_server(sched, lambda s: 2.0)
    # the first slot sends every 2 s from 0; the second at 5, 7 and 9, and not at 11 (its window closed at 10)
    assert sorted(sent for sent, *_ in log) == sorted([2.0 * k for k in range(97)] + [5.0, 7.0, 9.0])


def test_a_closed_loop_stops_sending_at_its_horizon():
    sched = LoadSchedule((spec(i) for i in range(1000)), slots=2, horizon_s=10.0, start_s=3.0)
    log = run_fake_server(sched, lambda s: 1.5)
    assert max(sent for sent, *_ in log) < 13.0
    assert max(answered for _, answered, _ in log) >= 13.0  # what was sent still finishes
    assert len(log) == 2 * 7  # each slot answered at 4.5, 6, ..., 12: 7 sends each


def test_open_loop_sends_each_at_its_time_whatever_is_in_flight():
    offsets = [0.0, 0.5, 0.5, 2.0, 9.0]
    sched = LoadSchedule((spec(i) for i in range(5)), total=5, offsets=offsets, start_s=1.0, horizon_s=5.0)
    assert sched.next_due_s() == 1.0
    assert [(at, s.request_id) for at, s in sched.pop_due(1.7)] == [(1.0, "r0"), (1.5, "r1"), (1.5, "r2")]
    assert sched.next_due_s() == 3.0 and sched.pop_due(2.99) == []
    assert ids(sched.pop_due(3.0)) == ["r3"]
    assert sched.pop_due(100.0) == []  # 9 s is past the 5 s horizon
    for i in range(4):
        sched.answered(f"r{i}", True, 20.0)
    assert sched.done()


def test_a_trace_request_waits_for_the_answers_it_depends_on_then_its_think_time():
    specs = [spec(0), spec(1, after=("r0",), think_s=0.3), spec(2), spec(3, after=("elsewhere",))]
    sched = LoadSchedule(specs, offsets=[0.0, 0.1, 0.2, 0.3], turnaround_s=0.01)
    assert ids(sched.pop_due(0.5)) == ["r0", "r2", "r3"]  # r1 held; r3's parent is not this schedule's: it goes
    assert sched.next_due_s() == math.inf and not sched.done()
    sched.answered("r0", True, 2.0)
    assert sched.next_due_s() == pytest.approx(2.31)
    assert sched.pop_due(2.3) == []
    [(at, child)] = sched.pop_due(2.31)
    assert child.request_id == "r1" and at == pytest.approx(2.31)


def test_a_trace_request_whose_answers_came_back_in_an_earlier_phase_goes_after_them():
    answers: dict[str, float] = {}
    warm = LoadSchedule([spec(0)], offsets=[0.0], answers=answers)
    warm.pop_due(0.0)
    warm.answered("r0", True, 4.0)
    measured = LoadSchedule([spec(1, after=("r0",), think_s=1.0)], offsets=[0.0], start_s=4.5, answers=answers)
    assert measured.pop_due(4.5) == [] and measured.next_due_s() == 5.0
    assert ids(measured.pop_due(5.0)) == ["r1"]


def test_a_conversation_turn_follows_an_ok_answer_after_the_think_time_and_a_failed_turn_ends_it():
    a1, a2, a3 = spec(0, rid="a1"), spec(1, rid="a2"), spec(2, rid="a3")
    b1, b2 = spec(3, rid="b1"), spec(4, rid="b2")
    follow = {"a1": a2, "a2": a3, "b1": b2}
    sched = LoadSchedule([a1, b1], total=5, slots=1, follow=follow, think_time_s=2.0, turnaround_s=0.5)
    assert ids(sched.pop_due(0.0)) == ["a1"]
    sched.answered("a1", True, 1.0)
    assert sched.next_due_s() == 3.5  # answer + turnaround + think time
    assert ids(sched.pop_due(3.5)) == ["a2"]
    sched.answered("a2", False, 4.0)  # failed: no a3; the slot takes the next conversation
    assert sched.next_due_s() == 4.5
    assert ids(sched.pop_due(4.5)) == ["b1"]
    sched.answered("b1", True, 5.0)
    assert ids(sched.pop_due(7.5)) == ["b2"]
    sched.answered("b2", True, 8.0)
    assert sched.pop_due(100.0) == [] and sched.done()


def _module(path: str) -> ast.Module:
    return ast.parse((SRC / path).read_text())


@pytest.mark.parametrize("path", ["sim/sweep.py", "client/driver.py"])
def test_the_simulator_and_the_client_run_the_one_schedule_not_a_copy_of_it(path):
    """Fails if slot, arrival or hold logic comes back into either driver: they build a LoadSchedule, and neither
    keeps a heap of send times, draws arrival times, reads a request's dependencies or think time, or holds
    a ramp's per-stream windows of its own."""
    tree = _module(path)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert "LoadSchedule" in names
    assert not {"heapq", "arrival_offsets"} & (imported | names)
    assert not {"after_ids", "think_s"} & attrs
    assert "user_windows" not in defined
