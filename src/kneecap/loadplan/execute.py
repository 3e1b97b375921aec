"""Run a load plan: candidates x ramps of cells, verdicts, capacity, candidate gates, handoff.

Order of gates per candidate: behaviour first (a candidate that changes contract behaviour is rejected
before anything else), then the SLO gate (a capacity region for every class with a budget, in every
state), and only then cost at the capacity found.
Each ramp is one sweep through the one door (kneecap.sweep.door.run_sweep), its cells the levels, the cell
verdict its stop rule. Records go to DIR/records/cell-<index>.jsonl as requests finish; DIR/summary.json is
rewritten after every cell.
"""

from __future__ import annotations

import math

from itertools import takewhile
from pathlib import Path
from typing import Callable

import orjson

from kneecap.errors import KneecapError
from kneecap.levels import SweepLevel
from kneecap.loadplan.behaviour import check, drift
from kneecap.loadplan.capacity import (
    accepted_reason,
    capacity_region,
    littles_law,
    offered_vs_completed,
    region_end_text,
)
from kneecap.loadplan.cells import auto_steps, build_ramps
from kneecap.loadplan.handoff import write_handoff
from kneecap.loadplan.observe import observe_cell
from kneecap.loadplan.schema import LoadPlanSpec
from kneecap.loadplan.targets import Ramp, make_candidate
from kneecap.loadplan.verdicts import judge, stops_ramp, why
from kneecap.metrics.accumulate import summarize_stream
from kneecap.metrics.stop import AUTH_REFUSED, SERVER_DEAD, stop_record
from kneecap.records import RecordWriter
from kneecap.results import CELL_RECORDS_DIR, build_summary, cell_records_name
from kneecap.sweep.progress import SilentProgress
from kneecap.sweep.resume import RecordsFile
from kneecap.sweep.door import run_sweep
from kneecap.sweep.runner import STATUS_INTERRUPTED, SweepState
from kneecap.workload import Workload

DEFAULT_REQUESTS_PER_CELL = 100


# a simulated closed-loop cell runs >= 4.5 C requests: its first round, then 3.5x C in flight
STEADY_STREAM_ROUNDS = 4.5


def _requests_for(spec: LoadPlanSpec, dimension: str, load: float, *, simulated: bool = False) -> int:
    """A cell's requests: the plan's. A simulated closed-loop cell (no wall time to save) runs at least enough to
    reach steady state by Little's law (its C in flight); a simulated rate cell too short to show it is judged
    transient, which does not pass (verdicts.steady_breaches)."""
    if spec.load.requests_per_cell:
        if simulated and dimension == "concurrency":
            return max(spec.load.requests_per_cell, math.ceil(STEADY_STREAM_ROUNDS * load))
        return spec.load.requests_per_cell
    # duration: rate x duration requests (open loop), or enough for C workers to cycle (closed loop)
    if dimension == "rate":
        return max(1, int(load * spec.load.duration_s))
    return max(int(load) * 4, DEFAULT_REQUESTS_PER_CELL)


def _cost(candidate_spec, cap_metrics: dict | None) -> dict | None:
    """Cost per million output tokens at the capacity found (None without a cost declaration)."""
    cost = candidate_spec.cost
    if cost is None or not cap_metrics:
        return None
    tok_s = cap_metrics.get("output_tok_s")
    if cost.gpu_hour_usd is not None:
        gpus = cost.num_gpus or 1
        if not tok_s:
            return None
        usd_per_mtok = cost.gpu_hour_usd * gpus / (tok_s * 3600) * 1e6
        return {
            "basis": "self-hosted",
            "usd_per_gpu_hour": cost.gpu_hour_usd,
            "num_gpus": gpus,
            "output_tok_s_at_capacity": tok_s,
            "usd_per_million_output_tokens": usd_per_mtok,
        }
    if cost.input_usd_per_mtok is not None or cost.output_usd_per_mtok is not None:
        return {
            "basis": "managed",
            "usd_per_million_input_tokens": cost.input_usd_per_mtok,
            "usd_per_million_output_tokens": cost.output_usd_per_mtok,
        }
    return None


def _steps(spec: LoadPlanSpec, cand, classes: dict) -> list:
    if spec.load.steps != "auto":
        return list(spec.load.steps)
    from kneecap.plan.preflight import preflight

    isl = max(c.input.upper_bound or int(c.input.expected) for c in classes.values())
    osl = max(c.output.upper_bound or int(c.output.expected) for c in classes.values())
    cap = cand.kv_capacity_tokens  # steps up to twice the concurrency the candidate's KV pool holds safely
    return auto_steps(
        preflight(cap, isl=isl, osl=osl, concurrencies=[1], block_size=cand.block_size).max_safe_concurrency
        if cap
        else None
    )


def _cell_count(spec: LoadPlanSpec, cand_spec, classes: dict, base_dir: Path) -> int:
    """How many cells one candidate's ramps hold (its share of the run order)."""
    cand = make_candidate(cand_spec.target, base_dir) if spec.load.steps == "auto" else None
    return len(_steps(spec, cand, classes)) * len(classes) * len(spec.states) * spec.repetitions


def _row(cell, index: int) -> dict:
    return {
        "index": index,
        "candidate": cell.candidate,
        "class": cell.class_name,
        "state": cell.state,
        "load": {cell.dimension: int(cell.load) if cell.dimension == "concurrency" else cell.load},
        "repetition": cell.repetition,
    }


class CellRecords:
    """A ramp's store (kneecap.sweep.store.SweepStore): one records file per cell (records/cell-NNNN.jsonl, a
    record's level is its cell's index), each record appended as it finishes, after the plan's privacy rules (a
    run killed mid-cell keeps every finished request); closed, fsynced, when the cell ends (`sync`); the ramp's
    summary handed to `on_save` after every cell (the run writes its own summary.json)."""

    def __init__(self, folder: Path, privacy, on_save: Callable[[dict], None] = lambda summary: None):
        self._folder, self._privacy, self._open, self._on_save = folder, privacy, {}, on_save

    def write(self, record) -> None:
        if not self._privacy.keep_prompts:
            record.prompt = None
        if self._privacy.redact_server_strings:
            record.error_message = None  # the server's own words: kept out when asked
        if record.level not in self._open:
            self._open[record.level] = RecordWriter(self._folder / cell_records_name(record.level))
        self._open[record.level].write(record)

    def sync(self) -> None:
        while self._open:
            self._open.popitem()[1].close()

    def tell(self) -> int:
        return 0  # where a cell's records start in its own file

    def level_records(self, level: int, offset: int = 0):
        return RecordsFile(self._folder / cell_records_name(level)).level_records(level, offset)

    def save(self, summary: dict) -> None:
        self._on_save(summary)


class _Notes(SilentProgress):
    """The runner's and the driver's warnings (e.g. reused connections) as the run's progress lines."""

    def __init__(self, say):
        self.note = say


class _PlanRun:
    """A run's cells so far in run order, the candidate whose ramps run, what halted the run (a live server died or
    refused the key: it stops at once, the measured cells kept), its handoff; summary.json after every cell."""

    def __init__(self, spec: LoadPlanSpec, plan_path: Path, results, say, resume: dict | None):
        self.spec, self.plan_path, self.results, self.say, self.resumed = (
            spec,
            plan_path,
            results,
            say,
            resume is not None,
        )
        # --resume: the earlier run's cells that ran to their end, by index (a halted one runs again)
        self.done = {
            c["index"]: c
            for c in (resume or {}).get("cells", [])
            if c.get("verdict") in ("pass", "slo_breach", "limit") and not c.get("halted")
        }
        self.cells: list[dict] = []
        self.halted: dict | None = None
        self.any_executed = False
        self.identities: dict[str, dict] = {}
        self.handoff_path = (
            (results.path / "handoff") if self.done and (results.path / "handoff" / "handoff.json").exists() else None
        )
        self.cand = self.cand_spec = None
        self.baseline: dict[str, bool] = {}  # the behaviour cases' first answers, for drift

    def save(self, status: str = "running", **extra) -> dict:
        summary = build_summary(
            "run",
            [],
            None,
            self.halted,
            model_executed=self.any_executed,
            benchmark_executed=self.any_executed,
            status=status,
            plan_name=self.spec.name,
            plan_sha256=plan_digest(self.plan_path),
            description=self.spec.description,
            cells=self.cells,
            **extra,
        )
        self.results.write_summary(summary)
        return summary

    def ramp(self, ramp: list, offset: int, workload: Workload) -> None:
        """One ramp's cells (lowest load first) as the levels of one Sweep with the candidate's driver, each judged as
        it ends, the verdict the sweep's stop rule; the cells above a stop are "not_run"."""
        spec, say, dimension, arrival = self.spec, self.say, self.spec.load.dimension, self.spec.load.arrival
        kept = list(takewhile(lambda c: c.index + offset in self.done, ramp))  # finished before: a ramp's first cells
        for cell in kept:
            self.cells.append(self.done[cell.index + offset])
            say(f"{cell.key}: {self.cells[-1]['verdict']} (kept from the earlier run)")
        stop_at = next((c.load for c in kept if stops_ramp(self.done[c.index + offset]["verdict"], spec.stop)), None)
        rest, by_index = ramp[len(kept) :], {c.index + offset: c for c in ramp}
        if stop_at is None and rest:
            for i in (c.index + offset for c in rest):  # a cell the kill cut short: its records set aside, run again
                if self.resumed and (self.results.path / cell_records_name(i)).exists():
                    (self.results.path / cell_records_name(i)).replace(
                        self.results.path / cell_records_name(i, "discarded")
                    )
            warmup = spec.state.warmup_requests if rest[0].state == "warm" else 0
            levels = [
                SweepLevel(
                    index=c.index + offset,
                    value=int(c.load) if dimension == "concurrency" else c.load,
                    num_requests=_requests_for(spec, dimension, c.load, simulated=not self.cand.benchmark_executed),
                    num_warmup=warmup,
                    first_index=0,
                )
                for c in rest
            ]
            notes = _Notes(say)
            driver = Ramp(
                self.cand,
                notes,
                dimension=dimension,
                loads=tuple(lv.value for lv in levels),
                workload=workload,
                state=rest[0].state,
                warmup=warmup,
                seed=spec.seed,
                burstiness=1.0 if arrival.kind == "poisson" else arrival.burstiness,
                pause_s=spec.state.cold_pause_s,
                reset_prefix_cache=spec.state.reset_prefix_cache,
                **({"on_s": arrival.on_s, "off_s": arrival.off_s} if arrival.kind == "onoff" else {}),
            )

            def on_level(level, run, metrics: dict, records: list) -> None:
                self.cells.append(
                    self._judged(by_index[level.index], level.index, run, metrics, records, driver.notes[level.index])
                )

            def stop_rule(metrics: dict) -> dict | None:
                row = self.cells[-1]
                return (
                    stop_record(metrics[dimension], row["verdict"], why(row))
                    if stops_ramp(row["verdict"], spec.stop)
                    else None
                )

            def persist(ramp_summary: dict) -> None:
                stop = ramp_summary["stopped"] or {}
                if self.halted is None and stop.get("reason") in (
                    SERVER_DEAD,
                    AUTH_REFUSED,
                ):  # the runner's stop, as bench's
                    row = self.cells[-1]  # marked before summary.json is written: --resume runs this cell again
                    self.halted, row["halted"] = (
                        {"candidate": self.cand_spec.name, "cell": row["index"], **stop},
                        stop["reason"],
                    )
                    say(f"{by_index[row['index']].key}: run stopped: {stop['detail']}")
                self.save()

            state = SweepState()
            final = run_sweep(
                self.cand.ramp_options(driver),
                driver,
                CellRecords(self.results.path, spec.privacy, on_save=persist),
                levels=levels,
                state=state,
                progress=notes,
                summarize=summarize_stream,
                fields={
                    "kind": "run",
                    "model_executed": self.cand.model_executed,
                    "benchmark_executed": self.cand.benchmark_executed,
                },
                on_level=on_level,
                stop_rule=stop_rule,
            )
            if final.status == STATUS_INTERRUPTED:
                raise KeyboardInterrupt  # the records are kept; --resume runs the cut cell again
            if self.halted is not None:
                return  # no later cell, not even a not_run one
            stop_at, rest = (state.stopped or {}).get("at"), rest[len(state.levels) :]
        self.cells += [
            {
                **_row(c, c.index + offset),
                "verdict": "not_run",
                "breaches": [],
                "limit": None,
                "metrics": None,
                "reason": f"ramp stopped at {dimension} {stop_at:g}",
            }
            for c in rest
        ]

    def _judged(self, cell, index: int, run, level: dict, records: list, state_note: str) -> dict:
        """A cell's row: its level summary (the runner's, with invalid_outputs), verdict, what it observed and the
        rate it offered; the run's first failing cell writes the handoff, a simulated cell its engine trace."""
        spec, results, cand = self.spec, self.results, self.cand
        if run.trace:  # the simulator's per-step trace: batch composition, KV blocks, queue depth
            (results.path / cell_records_name(index, "trace")).write_bytes(
                b"".join(orjson.dumps(t) + b"\n" for t in run.trace)
            )
        drifted: list[str] = []
        if self.baseline and cand.model_executed:
            drifted = drift(
                self.baseline,
                {
                    case.name: check(case.expect, cand.answer(case.prompt, case.max_tokens) or "")[0]
                    for case in spec.behaviour
                },
            )
        # invalid output: a completed request whose server-reported output length is not what was asked
        # (the client asks for exactly that many tokens), or that produced no tokens at all
        level["invalid_outputs"] = invalid = (level.get("token_mismatch") or {}).get("output", 0) + sum(
            1 for r in records if r.ok and not r.warmup and r.num_output_tokens == 0
        )
        verdict = judge(
            level,
            spec.slo.get(cell.class_name),
            spec.stop,
            behaviour_drift=drifted,
            invalid_outputs=invalid,
            simulated=not cand.benchmark_executed,
        )
        row = {
            **_row(cell, index),
            "verdict": verdict["verdict"],
            "breaches": verdict["breaches"],
            "limit": verdict["limit"],
            "metrics": level,
            "state_reached": state_note,
            "little": littles_law(records),
            "observed": observe_cell(records, run.trace, run.server_metrics),
            "offered": offered_vs_completed(
                records, level.get("duration_s"), nominal_rate=cell.load if cell.dimension == "rate" else None
            ),
            "records": cell_records_name(index),
        }
        self.say(f"{cell.key}: {verdict['verdict']}" + (f" ({why(row)})" if verdict["verdict"] != "pass" else ""))
        if verdict["verdict"] != "pass" and self.handoff_path is None:
            self.handoff_path = write_handoff(
                results.path / "handoff",
                plan_path=self.plan_path,
                cell=row,
                records=records,
                identity=self.identities[self.cand_spec.name],
                workload={
                    "class": cell.class_name,
                    "spec": spec.classes[cell.class_name].model_dump(),
                    "seed": spec.seed + index,
                    "generator": "kneecap.workload.make_requests",
                },
                manifest=results.read_manifest() if results.manifest_path.exists() else {},
                target=self.cand_spec.target.model_dump(),
            )
        return row


def run_load_plan(
    spec: LoadPlanSpec,
    base_dir: Path,
    plan_path: Path,
    results,
    *,
    progress=None,
    resume: dict | None = None,
    only=None,
) -> dict:
    """Execute the plan; `results` is a kneecap.results.ResultsDir. Returns the summary dict.

    resume: the summary.json of an earlier run of the same plan into the same folder; its finished cells
    are kept as they are, and a cell that was cut short has its records set aside
    (records/cell-NNNN.discarded.jsonl) and runs again.
    only: a kneecap.loadplan.reproduce.CellSelection — run that one cell (at its place in the run order,
    so with its seed) and judge it; no candidate verdict is given from one cell.
    """
    say = progress or (lambda line: None)
    classes = {name: c.to_request_class(name, base_dir) for name, c in spec.classes.items()}
    (results.path / CELL_RECORDS_DIR).mkdir(parents=True, exist_ok=True)
    run = _PlanRun(spec, plan_path, results, say, resume)
    cells, candidates_out, identities = run.cells, [], run.identities
    skipped_cells = 0  # --cell: the cells earlier candidates hold in the run order, so the chosen one keeps its index
    for cand_spec in spec.candidates:
        if run.halted is not None:
            break
        if only is not None and cand_spec.name != only.candidate:
            if (
                not cells
            ):  # a candidate before the chosen one (assumed past its behaviour gate, as simulators always are)
                skipped_cells += _cell_count(spec, cand_spec, classes, base_dir)
            continue
        cand = make_candidate(cand_spec.target, base_dir)
        run.cand, run.cand_spec, run.baseline = cand, cand_spec, {}
        baseline = run.baseline
        run.any_executed = run.any_executed or cand.benchmark_executed
        identities[cand_spec.name] = (
            _redacted(cand.identity()) if spec.privacy.redact_server_strings else cand.identity()
        )
        entry = {
            "name": cand_spec.name,
            "target": cand_spec.target.kind,
            "routing": cand_spec.routing,
            "model_executed": cand.model_executed,
            "benchmark_executed": cand.benchmark_executed,
        }
        # -- gate 1: behaviour replay ----------------------------------------------------------------
        behaviour_rows = []
        for case in spec.behaviour:
            answer = cand.answer(case.prompt, case.max_tokens)
            if answer is None:
                behaviour_rows.append(
                    {
                        "case": case.name,
                        "executed": False,
                        "passed": None,
                        "detail": "not executed: the simulator runs no model",
                    }
                )
                continue
            ok, detail = check(case.expect, answer)
            baseline[case.name] = ok
            behaviour_rows.append(
                {
                    "case": case.name,
                    "executed": True,
                    "passed": ok,
                    "detail": detail,
                    "answer": answer if spec.privacy.keep_prompts else None,
                }
            )
        entry["behaviour"] = behaviour_rows
        failed_cases = [r["case"] for r in behaviour_rows if r["passed"] is False]
        if failed_cases:
            entry.update(
                verdict="rejected",
                gate="behaviour",
                reason=f"behaviour changed: case(s) {', '.join(failed_cases)} no longer meet their expectation",
            )
            candidates_out.append(entry)
            say(f"{cand_spec.name}: rejected at the behaviour gate ({', '.join(failed_cases)})")
            continue
        # -- the ramps, each a sweep of the one level runner ---------------------------------------------
        offset = len(cells) + skipped_cells
        for ramp in build_ramps(
            cand_spec.name,
            list(classes),
            list(spec.states),
            spec.load.dimension,
            _steps(spec, cand, classes),
            spec.repetitions,
        ):
            ramp = [cell for cell in ramp if only is None or only.matches(cell)]
            if run.halted is None and ramp:
                run.ramp(ramp, offset, Workload(classes=(classes[ramp[0].class_name],)))
        if run.halted is not None:
            entry.update(
                verdict="not judged",
                gate=None,
                reason=f"the run stopped at cell {run.halted['cell']}: {run.halted['detail']}",
            )
        candidates_out.append(entry)
    halted, handoff_path = run.halted, run.handoff_path
    if halted is not None:  # candidates the run did not reach
        reached = {e["name"] for e in candidates_out}
        candidates_out += [
            {
                "name": c.name,
                "target": c.target.kind,
                "routing": c.routing,
                "verdict": "not judged",
                "gate": None,
                "reason": f"not run: the run stopped before it ({halted['detail']})",
            }
            for c in spec.candidates
            if c.name not in reached
        ]
    if only is not None and not cells:
        raise KneecapError(
            f"no cell of the plan matches {only.key}",
            "check --load against the steps the plan ran (steps: auto picks them at run time)",
        )
    capacity = capacity_region(cells)
    # -- gate 2: SLO; then cost ----------------------------------------------------------------------
    for entry in candidates_out:
        if entry.get("verdict"):
            continue
        if only is not None:
            cell = cells[0]
            entry.update(
                verdict="not judged",
                gate=None,
                capacity=capacity.get(entry["name"], {}),
                cost=None,
                peak_output_tok_s=(cell.get("metrics") or {}).get("output_tok_s"),
                reason=f"one cell re-run ({only.key}): {cell['verdict']}"
                + (f" ({why(cell)})" if cell["verdict"] != "pass" else ""),
            )
            continue
        region = capacity.get(entry["name"], {})
        required = spec.load.required
        missing = []
        for cls_name in spec.slo:
            for state in spec.states:
                info = region.get(cls_name, {}).get(state)
                cap = info.get("capacity_shown", info["capacity"]) if info else None  # a rate as offered
                # `required` is a load the candidate must be shown to carry: on the rate dimension, the rate its
                # capacity step was really offered at (its slowest repetition), not the step's name
                offered = info.get("offered_at_capacity") if info else None
                carried = cap if cap is None or offered is None else min(cap, offered)
                if carried is None or (required is not None and carried < required):
                    need = ""
                    if required is not None and carried is not None:
                        need = f" (required {required:g}" + (
                            f"; its capacity step went out at {offered:.3g} req/s)"
                            if offered is not None and offered < required <= cap
                            else ")"
                        )
                    missing.append(f"{cls_name}/{state}: {region_end_text(info) if info else 'no load step'}{need}")
        if missing:
            entry.update(
                verdict="rejected",
                gate="slo",
                reason=(
                    "fails the SLO gate — "
                    + "; ".join(missing)
                    + (f" — rejected for {entry['routing']} routing" if entry.get("routing") else "")
                ),
            )
        else:
            entry.update(
                verdict="accepted", gate=None, reason=accepted_reason(region, list(spec.slo), list(spec.states))
            )
        entry["capacity"] = region
        cand_spec = next(c for c in spec.candidates if c.name == entry["name"])
        entry["cost"] = (
            {
                cls: _cost(cand_spec, (region.get(cls, {}).get(spec.states[0]) or {}).get("at_capacity"))
                for cls in spec.classes
            }
            if cand_spec.cost
            else None
        )
        entry["peak_output_tok_s"] = max(
            (c["metrics"]["output_tok_s"] or 0 for c in cells if c["candidate"] == entry["name"] and c.get("metrics")),
            default=None,
        )
    accepted = [e for e in candidates_out if e["verdict"] == "accepted"]
    return run.save(
        status="stopped" if halted else "complete",
        capacity=capacity,
        candidates=candidates_out,
        handoff=str(handoff_path.relative_to(results.path)) if handoff_path else None,
        selected_cell=only.key if only is not None else None,
        identities=identities,
        worksheet={
            "classes": {n: c.model_dump() for n, c in spec.classes.items()},
            "budgets": {n: b.model_dump(exclude_none=True) for n, b in spec.slo.items()},
            "states": list(spec.states),
            "load": spec.load.model_dump(),
            "repetitions": spec.repetitions,
            "stop": spec.stop.model_dump(),
            "seed": spec.seed,
            "ledger": {name: ident.get("plan", {}).get("ledger") for name, ident in identities.items()},
        },
        preferred=min(accepted, key=lambda e: (_first_cost(e) is None, _first_cost(e) or 0))["name"]
        if accepted
        else None,
    )


def _redacted(identity: dict) -> dict:
    """A server candidate's identity without strings the server chose (model ids, versions, URLs)."""
    if identity.get("kind") != "server":
        return identity
    return {
        "kind": "server",
        "redacted": True,
        "endpoint": identity.get("endpoint"),
        "kv_capacity_tokens": (identity.get("server") or {}).get("kv_capacity_tokens"),
        "connections": identity.get("connections"),
    }  # kneecap's own words: keep-alive and why


def plan_digest(plan_path: Path) -> str:
    """sha256 of the plan file: --resume refuses a folder written by a different plan."""
    import hashlib

    return hashlib.sha256(Path(plan_path).read_bytes()).hexdigest()


FAIL_ON = ("errors", "limit", "slo", "rejected")


def fail_on_reason(summary: dict, fail_on: tuple[str, ...]) -> str | None:
    """Why `--fail-on` turns this run into exit 1, or None. errors: a request failed; limit: a cell crossed
    a declared limit; slo: a cell missed a budget; rejected: a candidate was rejected."""
    cells = summary.get("cells", [])
    failed = sum((c.get("metrics") or {}).get("failed") or 0 for c in cells)
    limit, slo = ([c for c in cells if c.get("verdict") == v] for v in ("limit", "slo_breach"))
    rejected = [c["name"] for c in summary.get("candidates", []) if c.get("verdict") == "rejected"]
    reasons = {
        "errors": failed and f"run: {failed} request(s) failed (--fail-on errors)",
        "limit": limit
        and f"run: {len(limit)} cell(s) crossed a declared limit, first: {limit[0].get('limit')} (--fail-on limit)",
        "slo": slo and f"run: {len(slo)} cell(s) missed an SLO budget (--fail-on slo)",
        "rejected": rejected and f"run: candidate(s) rejected: {', '.join(rejected)} (--fail-on rejected)",
    }
    return next((reasons[k] for k in FAIL_ON if k in fail_on and reasons[k]), None)


def _first_cost(entry: dict) -> float | None:
    for c in (entry.get("cost") or {}).values():
        if c and c.get("usd_per_million_output_tokens") is not None:
            return c["usd_per_million_output_tokens"]
    return None
