"""A workload class file for `kneecap recommend --classes FILE` (YAML or JSON):

    classes:
      - {name: chat, input: "lognormal:mean=1000,std=300,max=4000", output: "200", weight: 0.8}
      - {name: rag, input: "8000", output: "uniform:100:400", weight: 0.2}

lengths in kneecap's length-spec grammar (kneecap.workload.lengthspec); weights are shares of the traffic.
Owns checking the file (recommend.list_file reads it); the mix is sampled by kneecap.workload exactly as
simulate and bench do.
"""

from __future__ import annotations

from pathlib import Path

from kneecap.errors import KneecapError
from kneecap.list_file import read_list_file
from kneecap.workload import RequestClass, Workload
from kneecap.workload.lengthspec import parse_length_spec

_HINT = 'write e.g. classes: [{name: chat, input: "lognormal:mean=1000,std=300,max=4000", output: "200", weight: 1}]'


def load_classes(path: str | Path) -> Workload:
    items = read_list_file(path, "--classes", "classes", "classes", _HINT)
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "input" not in item or "output" not in item:
            raise KneecapError(f"--classes file {path}: class {i + 1} needs input and output lengths", _HINT)
        unknown = set(item) - {"name", "input", "output", "weight"}
        if unknown:
            raise KneecapError(
                f"--classes file {path}: class {i + 1} has unknown keys {sorted(unknown)}",
                "use name, input, output and weight",
            )
        ins, outs = parse_length_spec(str(item["input"])), parse_length_spec(str(item["output"]))
        for what, dist in (("input", ins), ("output", outs)):
            if dist.upper_bound is None:
                raise KneecapError(
                    f"--classes file {path}: class {i + 1}'s {what} length has no maximum",
                    "add max=N to a normal or lognormal length (the context the engine must hold)",
                )
        try:
            weight = float(item.get("weight", 1.0))
        except (TypeError, ValueError):
            raise KneecapError(f"--classes file {path}: class {i + 1}'s weight is not a number", _HINT) from None
        out.append(RequestClass(name=str(item.get("name", f"class{i + 1}")), input=ins, output=outs, weight=weight))
    return Workload(classes=tuple(out))


def mean_lengths(w: Workload) -> tuple[int, int]:
    """Traffic-weighted mean input and output tokens (what the bound and the confirm run use)."""
    total = sum(c.weight for c in w.classes)
    isl = sum(c.weight * c.input.expected for c in w.classes) / total
    osl = sum(c.weight * c.output.expected for c in w.classes) / total
    return max(1, round(isl)), max(1, round(osl))
