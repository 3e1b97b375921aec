"""--export: every level of a finished sweep written in another tool's format, so dashboards built for it read
kneecap's: `vllm` as `vllm bench serve --save-result` JSON (kneecap.metrics.export_vllm) into DIR/vllm/level-N.json;
`br` as llm-d Benchmark Report v0.2.1 YAML (kneecap.metrics.export_br) into DIR/br/level-N.yaml. Owns the files
only; `export` is the one entry the commands call."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from kneecap.sweep.resume import RecordsFile
from kneecap.errors import KneecapError
from kneecap.metrics.export_br import ReportContext, to_benchmark_report
from kneecap.metrics.export_vllm import to_vllm_result
from kneecap.metrics.summary_model import (
    DeploymentFields,
    EngineFields,
    LevelSummary,
    ServerFields,
    SweepSummary,
    WorkloadFields,
)

FORMATS = ("vllm", "br")


def check_format(name: str | None) -> None:
    if name is not None and name not in FORMATS:
        raise KneecapError(f"--export {name!r} is not a known format", "pass --export vllm or --export br")


def export(name: str | None, folder: Path, summary: dict, *, model_id: str, burstiness: float = 1.0) -> list[Path]:
    """Write the sweep in format `name` (None: nothing); returns the paths written."""
    if name == "vllm":
        return export_vllm(folder, summary, model_id=model_id, burstiness=burstiness)
    if name == "br":
        return export_br(folder, summary, model_id=model_id)
    return []


def command_flags(command: list | None) -> dict:
    """A recorded command line's flags as {"--flag": value} (None for a flag given alone), the program and the
    subcommand left out: the report's `native.args`."""
    args = [str(a) for a in (command or [])[2:]]
    flags: dict = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if eq:
                flags[name] = value
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                flags[name] = args[i + 1]
                i += 1
            else:
                flags[name] = None
        i += 1
    return flags


def export_br(folder: Path, summary: dict, *, model_id: str) -> list[Path]:
    """One llm-d Benchmark Report per level that ran for a while; returns the paths written."""
    import yaml

    out = Path(folder) / "br"
    out.mkdir(exist_ok=True)
    manifest_path = Path(folder) / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    typed = SweepSummary.read(summary)
    ctx = ReportContext(
        kind=typed.kind,
        model=model_id or None,
        run_id=[str(Path(folder).resolve()), manifest.get("created_at")],
        started_at=manifest.get("created_at"),
        kneecap_version=manifest.get("kneecap_version"),
        flags=command_flags(manifest.get("command")),
        deployment=typed.deployment or DeploymentFields(),
        server=typed.server or ServerFields(),
        engine=typed.engine or EngineFields(),
        workload=typed.workload or WorkloadFields(),
    )
    records = RecordsFile(Path(folder) / "requests.jsonl")
    written = []
    for level in typed.levels:
        if not level.duration_s or level.partial:
            continue
        doc = to_benchmark_report(level, records.level_records(level.level), ctx)
        path = out / f"level-{level.level}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        written.append(path)
    return written


def export_vllm(folder: Path, summary: dict, *, model_id: str, burstiness: float = 1.0) -> list[Path]:
    """One file per level that ran for a while; returns the paths written."""
    out = Path(folder) / "vllm"
    out.mkdir(exist_ok=True)
    records = RecordsFile(Path(folder) / "requests.jsonl")
    date = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")  # vLLM's own date format
    written = []
    for level in summary["levels"]:
        if not level.get("duration_s") or level.get("partial"):
            continue
        doc = to_vllm_result(
            level, records.level_records(level["level"]), model_id=model_id, date=date, burstiness=burstiness
        )
        path = out / f"level-{level['level']}.json"
        path.write_text(json.dumps(doc, indent=2) + "\n")
        written.append(path)
    return written


def export_run_br(folder: Path, summary: dict, targets: dict[str, dict]) -> list[Path]:
    """`kneecap run --export br`: one llm-d Benchmark Report per cell that ran (DIR/br/cell-NNNN.yaml); `targets`
    maps each candidate to its target as the plan states it (kind, model, gpu, tp, pp, ep, engine_defaults or
    base_url)."""
    import yaml

    from kneecap.records import read_records

    out = Path(folder) / "br"
    out.mkdir(exist_ok=True)
    manifest_path = Path(folder) / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    written = []
    for cell in summary.get("cells") or []:
        metrics = cell.get("metrics")
        if not metrics or not metrics.get("duration_s") or not cell.get("records"):
            continue
        target = targets.get(cell["candidate"], {})
        simulated = target.get("kind") == "simulator"
        ctx = ReportContext(
            kind="simulate" if simulated else "bench",
            model=target.get("model"),
            run_id=[str(Path(folder).resolve()), manifest.get("created_at"), cell["candidate"]],
            started_at=manifest.get("created_at"),
            kneecap_version=manifest.get("kneecap_version"),
            flags={
                "--cell": f"{cell['candidate']}/{cell['class']}/{cell['state']}",
                **{f"--{k}": str(v) for k, v in (cell.get("load") or {}).items()},
                "--repetition": str(cell.get("repetition")),
            },
            deployment=DeploymentFields(
                model=target.get("model"),
                gpu=target.get("gpu"),
                tp=target.get("tp"),
                pp=target.get("pp"),
                ep=target.get("ep"),
                num_gpus=(target.get("tp") or 1) * (target.get("pp") or 1),
            )
            if simulated
            else DeploymentFields(),
            engine=EngineFields(defaults=target.get("engine_defaults")) if simulated else EngineFields(),
            server=ServerFields() if simulated else ServerFields(model_id=target.get("model")),
        )
        level = LevelSummary.model_validate({**metrics, **(cell.get("load") or {}), "level": cell.get("index", 0)})
        doc = to_benchmark_report(level, read_records(Path(folder) / cell["records"]), ctx)
        doc["run"]["keywords"] = [*doc["run"]["keywords"], "run", str(cell["candidate"])]
        doc["run"]["description"] = (
            f"kneecap run, cell {cell['candidate']}/{cell['class']}/{cell['state']} at "
            f"{cell.get('load')} (repetition {cell.get('repetition')})"
        )
        path = out / f"cell-{int(cell.get('index', len(written))):04d}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        written.append(path)
    return written
