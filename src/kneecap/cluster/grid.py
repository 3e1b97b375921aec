"""Simulation grids: a list of `kneecap simulate` configurations run as Ray tasks across a cluster (or
one by one here), each giving exactly the summary.json that configuration gives on its own.

A configuration is a mapping of simulate's own option names to values ({"preset": "llama-3.1-8b",
"gpu": "h100-sxm", "concurrency": "1,8,64", "requests": 200}; lists are joined with commas, true/false
are switches). Each one runs the simulate command itself, called as a library function in a Ray task on a
cluster node (or here, one by one; never as a subprocess): its summary is byte-identical for the same
configuration and seed, so a grid cannot drift from what `kneecap simulate` computes. Owns the fan-out only:
not the simulation, not its flags.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Sequence

from kneecap.errors import KneecapError
from kneecap.list_file import read_list_file

RUNNER_FLAGS = {"out", "json", "quiet", "no_report", "grid", "ray"}  # set by the grid, not by a configuration
TASK_TIMEOUT_S = 3600.0  # one configuration's simulation
NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")
_GRID_HINT = 'write e.g. [{"preset": "llama-3.1-8b", "gpu": "h100-sxm", "concurrency": "1,8"}]'


def load_grid(path: str | Path) -> list[dict]:
    """A JSON or YAML file holding a list of configurations (mappings), or a one-line error."""
    return read_list_file(path, "--grid", None, "simulate configurations", _GRID_HINT, mappings=True)


def config_args(config: dict, index: int) -> list[str]:
    """One configuration as simulate's command-line options (name and runner-set options excluded)."""
    args: list[str] = []
    for key, value in config.items():
        name = str(key).strip().lstrip("-").replace("-", "_")
        if name == "name":
            continue
        if name in RUNNER_FLAGS:
            raise KneecapError(
                f"grid configuration {index} sets {key!r}, which the grid sets itself", f"drop {key!r} from it"
            )
        flag = "--" + name.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False:
            args.append("--no-" + name.replace("_", "-"))
        elif value is None:
            continue
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(str(v) for v in value)]
        elif isinstance(value, (str, int, float)):
            args += [flag, str(value)]
        else:
            raise KneecapError(
                f"grid configuration {index}: {key!r} is a {type(value).__name__}",
                "give each option a string, number, list or true/false",
            )
    return args


def config_name(config: dict, index: int) -> str:
    """The folder a configuration's results go to: its index, then its `name` if it has one."""
    name = NAME_RE.sub("-", str(config.get("name") or "")).strip("-")[:60]
    return f"{index:03d}-{name}" if name else f"{index:03d}"


def simulate_one(args: Sequence[str], simulate: Callable[[list[str]], tuple[int, str]]) -> tuple[int, bytes, str]:
    """One configuration through `simulate(ARGS)`, the simulate command called as a library function in this
    process (kneecap.cli.simulate.simulate_in_process, handed in by the command: this layer does not import
    the CLI), into a temporary folder: (exit code, summary.json bytes, stderr)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kneecap-grid-") as tmp:
        out = Path(tmp) / "run"
        code, stderr = simulate([*args, "--out", str(out), "--quiet", "--no-report"])
        summary = (out / "summary.json").read_bytes() if code == 0 and (out / "summary.json").exists() else b""
    return code, summary, stderr


def _grid_task(args: Sequence[str], simulate) -> tuple[tuple[int, bytes, str], str]:
    """The Ray task: one configuration (a library call in the task's worker process), and the node it ran on."""
    import ray

    return simulate_one(args, simulate), ray.get_runtime_context().get_node_id()


def _checked(index: int, result: tuple[int, bytes, str]) -> bytes:
    code, summary, stderr = result
    if code != 0 or not summary:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        last = lines[-1].removeprefix("error: ") if lines else f"exit code {code}"
        raise KneecapError(f"grid configuration {index} failed: {last}", "fix that configuration in the grid file")
    return summary


def run_grid_bytes(
    configs: Sequence[dict],
    ray_address: str | None,
    nodes: list | None = None,
    *,
    simulate: Callable[[list[str]], tuple[int, str]],
) -> list[bytes]:
    """Every configuration's summary.json bytes, in order: as Ray tasks on `ray_address`, or here one by one,
    each through `simulate` (see simulate_one). `nodes` (a list) receives the Ray node id each ran on."""
    arg_lists = [config_args(c, i) for i, c in enumerate(configs)]
    if ray_address is None:
        return [_checked(i, simulate_one(args, simulate)) for i, args in enumerate(arg_lists)]
    from kneecap.cluster.connect import connect

    conn = connect(ray_address)
    ray = conn.ray
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(_grid_task)
        refs = [task.remote(args, simulate) for args in arg_lists]
        results = []
        for i, ref in enumerate(refs):
            try:
                result, node_id = ray.get(ref, timeout=TASK_TIMEOUT_S)
                results.append(_checked(i, result))
                if nodes is not None:
                    nodes.append(node_id)
            except KneecapError:
                raise
            except Exception as exc:  # a node died, a timeout: named, never a traceback
                raise KneecapError(
                    f"grid configuration {i} did not finish on the Ray cluster at {ray_address} ({type(exc).__name__})",
                    "check the cluster (ray status) and run the grid again",
                ) from None
        return results
    finally:
        conn.close()


def write_grid(
    out_dir: str | Path, configs: Sequence[dict], summaries: Sequence[bytes], nodes: Sequence[str] | None = None
) -> list[dict]:
    """OUT/NNN[-name]/summary.json per configuration (its bytes as simulate wrote them) and OUT/grid.json,
    the index: each configuration, its options, where its summary is (and the Ray node it ran on)."""
    from kneecap.results import write_atomic

    root = Path(out_dir)
    index = []
    for i, (config, blob) in enumerate(zip(configs, summaries)):
        folder = root / config_name(config, i)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "summary.json", blob)
        index.append(
            {
                "index": i,
                "config": config,
                "args": config_args(config, i),
                "summary": str(folder.relative_to(root) / "summary.json"),
            }
        )
        if nodes:
            index[-1]["ray_node_id"] = nodes[i]
    write_atomic(root / "grid.json", (json.dumps(index, indent=1) + "\n").encode())
    return index
