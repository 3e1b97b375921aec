"""The load plan the `kneecap run` tests share: two simulated candidates, one roomy and one starved
(max_num_seqs 1, so its TTFT explodes past concurrency 1). `PLAN` is its YAML text (tests edit it as text
where a line number matters); `variant(**overrides)` gives it with top-level keys replaced or, for a
mapping, merged one level deep (e.g. load={"steps": [1, 8, 32]})."""

from __future__ import annotations

import json

import yaml

PLAN = """\
name: two-candidates
seed: 5
classes:
  chat:
    input: {kind: uniform, low: 200, high: 600}
    output: {kind: fixed, value: 64}
slo:
  chat: {ttft_p99_ms: 600, itl_p99_ms: 200, error_rate: 0.01}
load:
  dimension: concurrency
  steps: [1, 8, 64]
  requests_per_cell: 40
repetitions: 2
candidates:
  - name: roomy
    target: {kind: simulator, model: llama-3.1-8b, gpu: h100-sxm}
    cost: {gpu_hour_usd: 2.0, num_gpus: 1}
  - name: starved
    target: {kind: simulator, model: llama-3.1-8b, gpu: h100-sxm, max_num_seqs: 1}
    cost: {gpu_hour_usd: 2.0, num_gpus: 1}
    routing: interactive
"""


def variant(**overrides) -> str:
    """PLAN with `overrides` applied, as YAML text (JSON is YAML)."""
    doc = yaml.safe_load(PLAN)
    for key, value in overrides.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) and isinstance(doc.get(key), dict) else value
    return json.dumps(doc, indent=1)
