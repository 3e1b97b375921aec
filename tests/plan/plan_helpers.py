"""Helpers for the planner tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

from kneecap.model.spec import Model


def make_gqa_70b(**changes) -> Model:
    """Seed 003's gqa-70b built directly: 80 layers, 64 heads, 8 KV heads, head_dim 128, 70e9 params, fp16."""
    fields = dict(
        name="gqa-70b",
        source="seed 003 (tests)",
        architecture="LlamaForCausalLM",
        num_hidden_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=128256,
        layer_types=("full_attention",) * 80,
        total_params=70_000_000_000,
        active_params=70_000_000_000,
        max_position_embeddings=131072,
        weight_dtype="fp16",
    )
    fields.update(changes)
    return Model(**fields)


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


def run_kneecap(*args: str, timeout: float = 120) -> Run:
    """`python -m kneecap ARGS` as a subprocess."""
    p = subprocess.run([sys.executable, "-m", "kneecap", *args], capture_output=True, text=True, timeout=timeout)
    return Run(p.returncode, p.stdout, p.stderr)
