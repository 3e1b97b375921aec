"""Run a load plan: candidates x ramps of cells, verdicts, capacity, candidate gates, handoff.

Order of gates per candidate (seed 004): behaviour first (a candidate that changes contract
behaviour is rejected before anything else), then the SLO gate (a capacity region for every class
with a budget, in every state), and only then cost at the capacity found.
Writes DIR/records/cell-<index>.jsonl as each cell ends and rewrites DIR/summary.json after every cell.
"""

from __future__ import annotations

from pathlib import Path

from kneecap.errors import KneecapError
from kneecap.loadplan.behaviour import check, drift
from kneecap.loadplan.capacity import accepted_reason, capacity_region, littles_law, offered_vs_completed, region_end_text
from kneecap.loadplan.cells import auto_steps, build_ramps
from kneecap.loadplan.handoff import write_handoff
from kneecap.loadplan.observe import observe_cell
from kneecap.loadplan.schema import LoadPlanSpec
from kneecap.loadplan.targets import make_candidate
from kneecap.loadplan.verdicts import judge
from kneecap.results import CELL_RECORDS_DIR, cell_records_name
from kneecap.workload import Workload

DEFAULT_REQUESTS_PER_CELL = 100


def _max_safe(candidate, isl: int, osl: int) -> int | None:
    from kneecap.plan.preflight import preflight

    cap = candidate.kv_capacity_tokens
    if not cap:
        return None
    return preflight(cap, isl=isl, osl=osl, concurrencies=[1], block_size=candidate.block_size).max_safe_concurrency


def _requests_for(spec: LoadPlanSpec, dimension: str, load: float) -> int:
    if spec.load.requests_per_cell:
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
        return {"basis": "self-hosted", "usd_per_gpu_hour": cost.gpu_hour_usd, "num_gpus": gpus,
                "output_tok_s_at_capacity": tok_s, "usd_per_million_output_tokens": usd_per_mtok}
    if cost.input_usd_per_mtok is not None or cost.output_usd_per_mtok is not None:
        return {"basis": "managed", "usd_per_million_input_tokens": cost.input_usd_per_mtok,
                "usd_per_million_output_tokens": cost.output_usd_per_mtok}
    return None


def finished_cells(previous: dict | None) -> dict[int, dict]:
    """Cells of an earlier (killed) run that ended, by index: `--resume` keeps them and re-runs the rest."""
    if not previous:
        return {}
    return {c["index"]: c for c in previous.get("cells", [])
            if c.get("verdict") in ("pass", "slo_breach", "limit", "not_run") and not c.get("halted")}


def _stops_ramp(row: dict, spec: LoadPlanSpec) -> bool:
    return row["verdict"] == "limit" or (row["verdict"] == "slo_breach" and spec.stop.stop_on_slo_breach)


def _steps(spec: LoadPlanSpec, cand, classes: dict) -> list:
    if spec.load.steps != "auto":
        return list(spec.load.steps)
    isl = max(c.input.upper_bound or int(c.input.expected) for c in classes.values())
    osl = max(c.output.upper_bound or int(c.output.expected) for c in classes.values())
    return auto_steps(_max_safe(cand, isl, osl))


def _cell_count(spec: LoadPlanSpec, cand_spec, classes: dict) -> int:
    """How many cells one candidate's ramps hold (its share of the run order)."""
    cand = make_candidate(cand_spec.target) if spec.load.steps == "auto" else None
    return len(_steps(spec, cand, classes)) * len(classes) * len(spec.states) * spec.repetitions


def run_load_plan(spec: LoadPlanSpec, base_dir: Path, plan_path: Path, results, *, progress=None,
                  resume: dict | None = None, only=None) -> dict:
    """Execute the plan; `results` is a kneecap.results.ResultsDir. Returns the summary dict.

    resume: the summary.json of an earlier run of the same plan into the same folder; its finished cells
    are kept as they are, and a cell that was cut short has its records set aside
    (records/cell-NNNN.discarded.jsonl) and runs again.
    only: a kneecap.loadplan.reproduce.CellSelection — run that one cell (at its place in the run order,
    so with its seed) and judge it; no candidate verdict is given from one cell.
    """
    from kneecap.metrics.summarize import summarize_level
    from kneecap.results import build_summary

    say = progress or (lambda line: None)
    classes = {name: c.to_request_class(name, base_dir) for name, c in spec.classes.items()}
    workloads = {name: Workload(classes=(rc,)) for name, rc in classes.items()}
    (results.path / CELL_RECORDS_DIR).mkdir(parents=True, exist_ok=True)
    arrival = spec.load.arrival
    burstiness = 1.0 if arrival.kind == "poisson" else arrival.burstiness
    bursts = {"on_s": arrival.on_s, "off_s": arrival.off_s} if arrival.kind == "onoff" else {}

    done = finished_cells(resume)
    cells: list[dict] = []
    candidates_out: list[dict] = []
    handoff_path = (results.path / "handoff") if done and (results.path / "handoff" / "handoff.json").exists() else None
    any_executed = False
    identities = {}
    skipped_cells = 0  # --cell: the cells earlier candidates hold in the run order, so the chosen one keeps its index
    halted: dict | None = None  # a live server died or refused the key: the run stops at once, measured cells kept
    for cand_spec in spec.candidates:
        if halted is not None:
            break
        if only is not None and cand_spec.name != only.candidate:
            if not cells:  # a candidate before the chosen one (assumed past its behaviour gate, as simulators always are)
                skipped_cells += _cell_count(spec, cand_spec, classes)
            continue
        cand = make_candidate(cand_spec.target)
        any_executed = any_executed or cand.benchmark_executed
        identities[cand_spec.name] = _redacted(cand.identity()) if spec.privacy.redact_server_strings else cand.identity()
        entry = {"name": cand_spec.name, "target": cand_spec.target.kind, "routing": cand_spec.routing,
                 "model_executed": cand.model_executed, "benchmark_executed": cand.benchmark_executed}
        # -- gate 1: behaviour replay ----------------------------------------------------------------
        baseline: dict[str, bool] = {}
        behaviour_rows = []
        for case in spec.behaviour:
            answer = cand.answer(case.prompt, case.max_tokens)
            if answer is None:
                behaviour_rows.append({"case": case.name, "executed": False, "passed": None,
                                       "detail": "not executed: the simulator runs no model"})
                continue
            ok, detail = check(case.expect, answer)
            baseline[case.name] = ok
            behaviour_rows.append({"case": case.name, "executed": True, "passed": ok, "detail": detail,
                                   "answer": answer if spec.privacy.keep_prompts else None})
        entry["behaviour"] = behaviour_rows
        failed_cases = [r["case"] for r in behaviour_rows if r["passed"] is False]
        if failed_cases:
            entry.update(verdict="rejected", gate="behaviour",
                         reason=f"behaviour changed: case(s) {', '.join(failed_cases)} no longer meet their expectation")
            candidates_out.append(entry)
            say(f"{cand_spec.name}: rejected at the behaviour gate ({', '.join(failed_cases)})")
            continue
        # -- the ramps ---------------------------------------------------------------------------------
        dimension = spec.load.dimension
        steps = _steps(spec, cand, classes)
        ramps = build_ramps([cand_spec.name], list(classes), list(spec.states), dimension, steps, spec.repetitions)
        offset = len(cells) + skipped_cells
        for ramp in ramps:
            if halted is not None:
                break
            stopped_at = None
            for cell in ramp:
                if only is not None and not only.matches(cell):
                    continue
                index = cell.index + offset
                row = {"index": index, "candidate": cell.candidate, "class": cell.class_name, "state": cell.state,
                       "load": {dimension: int(cell.load) if dimension == "concurrency" else cell.load},
                       "repetition": cell.repetition}
                if stopped_at is not None:
                    row.update(verdict="not_run", breaches=[], limit=None, metrics=None,
                               reason=f"ramp stopped at {dimension} {stopped_at:g}")
                    cells.append(row)
                    continue
                if index in done and done[index]["verdict"] != "not_run":  # --resume: this cell already ended
                    row = done[index]
                    cells.append(row)
                    say(f"{cell.key}: {row['verdict']} (kept from the earlier run)")
                    if _stops_ramp(row, spec):
                        stopped_at = cell.load
                    continue
                partial = results.path / cell_records_name(index)
                if resume is not None and partial.exists():  # cut short by the kill: keep it aside, run it again
                    partial.replace(results.path / cell_records_name(index, "discarded"))
                state_note = cand.settle(cell.state, spec.state.cold_pause_s, spec.state.reset_prefix_cache)
                n = _requests_for(spec, dimension, cell.load)
                warmup = spec.state.warmup_requests if cell.state == "warm" else 0
                # records are appended as requests finish (one os.write each, fsync at the cell's end), so a
                # run killed mid-cell keeps every finished request (tests/reliability/test_reliability_bounds.py)
                def keep(r):
                    if not spec.privacy.keep_prompts and r.prompt is not None:
                        r.prompt = None
                    if spec.privacy.redact_server_strings and r.error_message:
                        r.error_message = None  # the server's own words: kept out when asked

                run = cand.run_cell(index=index, dimension=dimension, load=cell.load,
                                    workload=workloads[cell.class_name], num_requests=n, warmup=warmup,
                                    seed=spec.seed + index, burstiness=burstiness, on_record=keep,
                                    records_path=results.path / cell_records_name(index), progress=say, **bursts)
                if run.trace:  # the simulator's per-step trace: batch composition, KV blocks, queue depth
                    import orjson

                    (results.path / cell_records_name(index, "trace")).write_bytes(b"".join(orjson.dumps(t) + b"\n" for t in run.trace))
                if run.level is not None:  # a live cell: the level summary of the one level runner, as bench's
                    level = dict(run.level)
                else:
                    level = summarize_level(run.records, **{dimension: row["load"][dimension]}, duration_s=run.duration_s)
                    level["suspect"] = bool(run.suspect)
                    if run.server_metrics:
                        level["server_metrics"] = run.server_metrics
                drifted: list[str] = []
                if baseline and cand.model_executed:
                    now = {case.name: check(case.expect, cand.answer(case.prompt, case.max_tokens) or "")[0]
                           for case in spec.behaviour}
                    drifted = drift(baseline, now)
                # invalid output: a completed request whose server-reported output length is not what was asked
                # (the client asks for exactly that many tokens), or that produced no tokens at all
                invalid = (level.get("token_mismatch") or {}).get("output", 0) + sum(
                    1 for r in run.records if r.ok and not r.warmup and r.num_output_tokens == 0)
                level["invalid_outputs"] = invalid
                verdict = judge(level, spec.slo.get(cell.class_name), spec.stop, behaviour_drift=drifted,
                                invalid_outputs=invalid)
                row.update(verdict=verdict["verdict"], breaches=verdict["breaches"], limit=verdict["limit"],
                           metrics=level, state_reached=state_note,
                           little=littles_law(run.records),
                           observed=observe_cell(run.records, run.trace, run.server_metrics),
                           offered=offered_vs_completed(run.records, level.get("duration_s"),
                                                        nominal_rate=cell.load if dimension == "rate" else None),
                           records=cell_records_name(index))
                cells.append(row)
                say(f"{cell.key}: {verdict['verdict']}" + (f" ({verdict['limit'] or '; '.join(verdict['breaches'])})"
                                                          if verdict["verdict"] != "pass" else ""))
                if verdict["verdict"] != "pass" and handoff_path is None:
                    handoff_path = write_handoff(results.path / "handoff", plan_path=plan_path, cell=row,
                                                 records=run.records, identity=identities[cand_spec.name],
                                                 workload={"class": cell.class_name, "spec": spec.classes[cell.class_name].model_dump(),
                                                           "seed": spec.seed + index, "generator": "kneecap.workload.make_requests"},
                                                 manifest=results.read_manifest() if results.manifest_path.exists() else {},
                                                 target=cand_spec.target.model_dump())
                if verdict["stops_ramp"]:
                    stopped_at = cell.load
                if run.stopped is not None:  # the same stop as bench's: the server is gone, or refuses the key
                    halted = {"candidate": cand_spec.name, "cell": index, **run.stopped}
                    row["halted"] = run.stopped["reason"]  # --resume runs this cell again
                    say(f"{cell.key}: run stopped: {run.stopped['detail']}")
                results.write_summary(build_summary("run", [], None, halted, model_executed=any_executed,
                                                    benchmark_executed=any_executed, status="running", cells=cells,
                                                    plan_name=spec.name, plan_sha256=plan_digest(plan_path)))
                if halted is not None:
                    break
        if halted is not None:
            entry.update(verdict="not judged", gate=None, reason=f"the run stopped at cell {halted['cell']}: {halted['detail']}")
        candidates_out.append(entry)
    if halted is not None:  # candidates the run did not reach
        reached = {e["name"] for e in candidates_out}
        candidates_out += [{"name": c.name, "target": c.target.kind, "routing": c.routing, "verdict": "not judged",
                            "gate": None, "reason": f"not run: the run stopped before it ({halted['detail']})"}
                           for c in spec.candidates if c.name not in reached]
    if only is not None and not cells:
        raise KneecapError(f"no cell of the plan matches {only.key}",
                           "check --load against the steps the plan ran (steps: auto picks them at run time)")
    capacity = capacity_region(cells)
    # -- gate 2: SLO; then cost ----------------------------------------------------------------------
    for entry in candidates_out:
        if entry.get("verdict"):
            continue
        if only is not None:
            cell = cells[0]
            entry.update(verdict="not judged", gate=None, capacity=capacity.get(entry["name"], {}), cost=None,
                         peak_output_tok_s=(cell.get("metrics") or {}).get("output_tok_s"),
                         reason=f"one cell re-run ({only.key}): {cell['verdict']}"
                                + (f" ({cell.get('limit') or '; '.join(cell.get('breaches') or [])})"
                                   if cell["verdict"] != "pass" else ""))
            continue
        region = capacity.get(entry["name"], {})
        required = spec.load.required
        missing = []
        for cls_name in spec.slo:
            for state in spec.states:
                info = region.get(cls_name, {}).get(state)
                cap = info.get("capacity_shown", info["capacity"]) if info else None  # a rate as offered
                if cap is None or (required is not None and cap < required):
                    need = f" (required {required:g})" if required is not None and cap is not None else ""
                    missing.append(f"{cls_name}/{state}: {region_end_text(info) if info else 'no load step'}{need}")
        if missing:
            entry.update(verdict="rejected", gate="slo",
                         reason=("fails the SLO gate — " + "; ".join(missing)
                                 + (f" — rejected for {entry['routing']} routing" if entry.get("routing") else "")))
        else:
            entry.update(verdict="accepted", gate=None, reason=accepted_reason(region, list(spec.slo), list(spec.states)))
        entry["capacity"] = region
        cand_spec = next(c for c in spec.candidates if c.name == entry["name"])
        entry["cost"] = {cls: _cost(cand_spec, (region.get(cls, {}).get(spec.states[0]) or {}).get("at_capacity"))
                         for cls in spec.classes} if cand_spec.cost else None
        entry["peak_output_tok_s"] = max((c["metrics"]["output_tok_s"] or 0 for c in cells
                                          if c["candidate"] == entry["name"] and c.get("metrics")), default=None)
    accepted = [e for e in candidates_out if e["verdict"] == "accepted"]
    summary = build_summary(
        "run", [], None, halted, model_executed=any_executed, benchmark_executed=any_executed,
        status="stopped" if halted else "complete",
        plan_name=spec.name, plan_sha256=plan_digest(plan_path), description=spec.description, cells=cells, capacity=capacity, candidates=candidates_out,
        handoff=str(handoff_path.relative_to(results.path)) if handoff_path else None,
        selected_cell=only.key if only is not None else None,
        identities=identities,
        worksheet={
            "classes": {n: c.model_dump() for n, c in spec.classes.items()},
            "budgets": {n: b.model_dump(exclude_none=True) for n, b in spec.slo.items()},
            "states": list(spec.states), "load": spec.load.model_dump(), "repetitions": spec.repetitions,
            "stop": spec.stop.model_dump(), "seed": spec.seed,
            "ledger": {name: ident.get("plan", {}).get("ledger") for name, ident in identities.items()},
        },
        preferred=min(accepted, key=lambda e: (_first_cost(e) is None, _first_cost(e) or 0))["name"] if accepted else None,
    )
    results.write_summary(summary)
    return summary


def _redacted(identity: dict) -> dict:
    """A server candidate's identity without strings the server chose (model ids, versions, URLs)."""
    if identity.get("kind") != "server":
        return identity
    return {"kind": "server", "redacted": True, "endpoint": identity.get("endpoint"),
            "kv_capacity_tokens": (identity.get("server") or {}).get("kv_capacity_tokens"),
            "connections": identity.get("connections")}  # kneecap's own words: keep-alive and why


def plan_digest(plan_path: Path) -> str:
    """sha256 of the plan file: --resume refuses a folder written by a different plan."""
    import hashlib

    return hashlib.sha256(Path(plan_path).read_bytes()).hexdigest()


FAIL_ON = ("errors", "limit", "slo", "rejected")


def fail_on_reason(summary: dict, fail_on: tuple[str, ...]) -> str | None:
    """Why `--fail-on` turns this run into exit 1, or None. errors: a request failed; limit: a cell crossed
    a declared limit; slo: a cell missed a budget; rejected: a candidate was rejected."""
    cells = summary.get("cells", [])
    if "errors" in fail_on:
        failed = sum((c.get("metrics") or {}).get("failed") or 0 for c in cells)
        if failed:
            return f"run: {failed} request(s) failed (--fail-on errors)"
    if "limit" in fail_on:
        hit = [c for c in cells if c.get("verdict") == "limit"]
        if hit:
            return f"run: {len(hit)} cell(s) crossed a declared limit, first: {hit[0].get('limit')} (--fail-on limit)"
    if "slo" in fail_on:
        hit = [c for c in cells if c.get("verdict") == "slo_breach"]
        if hit:
            return f"run: {len(hit)} cell(s) missed an SLO budget (--fail-on slo)"
    if "rejected" in fail_on:
        rej = [c["name"] for c in summary.get("candidates", []) if c.get("verdict") == "rejected"]
        if rej:
            return f"run: candidate(s) rejected: {', '.join(rej)} (--fail-on rejected)"
    return None


def _first_cost(entry: dict) -> float | None:
    for c in (entry.get("cost") or {}).values():
        if c and c.get("usd_per_million_output_tokens") is not None:
            return c["usd_per_million_output_tokens"]
    return None
