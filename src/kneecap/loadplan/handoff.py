"""The specialist handoff: when a limit fails, the smallest reproducible package.

A folder with: the plan file, the deployment / server identity, the workload generator and seed,
the raw trace of the failing cell (records without prompts), the threshold crossed, a one-variable
next experiment, and the environment manifest. Only this module and execute.py write files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kneecap.loadplan.reproduce import reproduce_command
from kneecap.loadplan.verdicts import why
from kneecap.records import RecordWriter, RequestRecord


def next_experiment(cell: dict, target: dict) -> str:
    """One variable to change next, chosen from what failed."""
    reason = (cell.get("limit") or "") + " " + " ".join(cell.get("breaches") or [])
    ((dim, load),) = cell["load"].items()
    lower = load / 2 if dim == "rate" else max(1, int(load) // 2)
    if "ttft" in reason and target.get("kind") == "simulator":
        seqs = target.get("max_num_seqs")
        if seqs:
            return f"repeat this cell with max_num_seqs {max(1, seqs // 2)} (only that changed) to see whether batching, not capacity, sets the TTFT tail"
    if "error rate" in reason or "timeout" in reason:
        return f"repeat this cell at {dim} {lower:g} (only the load changed) with server logs at debug level, to find the first failing request"
    if "unstable tail" in reason:
        return f"repeat this cell 3 times at {dim} {load:g} with a cold state each time, to tell a warm-up artefact from a scheduler pathology"
    if "suspect" in reason:
        return "repeat this cell with kneecap bench --workers 2 (only the client changed): the client, not the server, may have set the numbers"
    if "itl" in reason or "tpot" in reason:
        return "repeat this cell with the KV dtype changed to fp8 or TP doubled (one of them) to see whether decode bandwidth sets the ITL"
    return f"repeat this cell at {dim} {lower:g} (only the load changed) to bracket the threshold"


def write_handoff(
    folder: Path,
    *,
    plan_path: Path,
    cell: dict,
    records: list[RequestRecord],
    identity: dict,
    workload: dict,
    manifest: dict,
    target: dict,
) -> Path:
    """Write the handoff package for one failing cell; returns its folder."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(plan_path, folder / "plan.yaml")
    with RecordWriter(folder / "failing_cell_requests.jsonl") as w:
        for r in records:
            if r.prompt is not None:
                r = RequestRecord.from_dict({**r.to_dict(), "prompt": None})  # traces keep hashes, not prompts
            w.write(r)
    ((dim, load),) = cell["load"].items()
    package = {
        "failing_cell": {k: cell[k] for k in ("candidate", "class", "state", "load", "repetition", "verdict")},
        "threshold_crossed": why(cell),
        "next_experiment": next_experiment(cell, target),
        "identity": identity,
        "target": target,
        "workload": workload,
        "environment": manifest,
        "reproduce": reproduce_command("plan.yaml", cell),
    }
    (folder / "handoff.json").write_text(json.dumps(package, indent=2, sort_keys=True, default=str) + "\n")
    lines = [
        f"# Handoff: {cell['candidate']} / {cell['class']} / {cell['state']} at {dim} {load:g}",
        "",
        f"- Threshold crossed: {package['threshold_crossed']}",
        f"- Next experiment (one variable): {package['next_experiment']}",
        f"- Reproduce (in this folder; the cell keeps its seed): `{package['reproduce']}`",
        f"- Raw trace: `failing_cell_requests.jsonl` ({len(records)} records, prompt hashes only)",
        "- Identity, workload generator and seed, environment: `handoff.json`",
    ]
    (folder / "README.md").write_text("\n".join(lines) + "\n")
    return folder
