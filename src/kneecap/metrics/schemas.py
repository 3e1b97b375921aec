"""The published JSON Schemas of kneecap's typed documents, generated from the models that read them (pure + a writer).

Owns docs/run.schema.json (the summary.json `kneecap run` writes: run_model.RunDocument) and
docs/recommend.schema.json (`kneecap recommend --out DIR`: recommend_model.RecommendDocument). They are generated,
not written by hand, so they cannot drift from what kneecap reads back: `python -m kneecap.metrics.schemas --write`
rewrites them and tests/metrics/test_published_schemas.py fails when a committed file differs. Like
docs/summary.schema.json (bench and simulate, written by hand), they name every key kneecap writes with its JSON
type and allow keys beyond those (a newer kneecap may add some). docs/metrics.md says what the keys mean.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DRAFT = "https://json-schema.org/draft/2020-12/schema"
DOCUMENTS = {
    "run.schema.json": (
        "kneecap.metrics.run_model:RunDocument",
        "kneecap run summary.json",
        "The summary `kneecap run PLAN --out DIR` writes: each cell (workload class x load) with its verdict and "
        "metrics, the capacity region, the candidates' results and the plan. Generated from kneecap's reader "
        "(kneecap.metrics.run_model); latencies in ms, throughput per second; keys beyond those listed are allowed.",
    ),
    "recommend.schema.json": (
        "kneecap.metrics.recommend_model:RecommendDocument",
        "kneecap recommend.json",
        "What `kneecap recommend --out DIR` writes: the load, workload and SLO, the search funnel, every candidate "
        "deployment with its KV plan, prediction, binding SLO term and confirming commands, the Pareto frontiers and "
        "prices. Generated from kneecap's reader (kneecap.metrics.recommend_model); keys beyond those listed are "
        "allowed.",
    ),
}


def _model(path: str):
    import importlib

    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def schema(file_name: str) -> dict:
    """The JSON Schema published as docs/`file_name`."""
    model_path, title, description = DOCUMENTS[file_name]
    body = _model(model_path).model_json_schema(by_alias=True, mode="validation")
    body.pop("title", None)
    body.pop("description", None)
    return {"$schema": DRAFT, "$id": f"kneecap/{file_name}", "title": title, "description": description, **body}


def render(file_name: str) -> str:
    """The file's text: the schema as indented JSON, one newline at the end."""
    return json.dumps(schema(file_name), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write or check kneecap's generated JSON Schemas in docs/.")
    parser.add_argument("--docs", default="docs", help="the docs folder (default: docs)")
    parser.add_argument("--write", action="store_true", help="rewrite the files (default: check them)")
    args = parser.parse_args(argv)
    stale = []
    for name in DOCUMENTS:
        path = Path(args.docs) / name
        text = render(name)
        if args.write:
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            stale.append(str(path))
    for path in stale:
        print(f"error: {path} is not what kneecap reads — run python -m kneecap.metrics.schemas --write")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
