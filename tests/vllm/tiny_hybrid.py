"""A tiny random-weight Granite-4.0-H (GraniteMoeHybrid: 3 Mamba-2 + 1 attention layers) for vLLM's CPU build.

The weights are written by transformers' own GraniteMoeHybridForCausalLM.save_pretrained, run by the vLLM venv's
python (it has torch and transformers; kneecap's venv has neither), so the tensor names are the ones vLLM's
granitemoehybrid.py loader reads. The tokenizer is tiny_llama's 260-token byte-level one.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tiny_llama import BOS_ID, EOS_ID, MAX_POSITIONS, VOCAB_SIZE, write_tokenizer

CONFIG = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=128,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=MAX_POSITIONS,
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
    pad_token_id=259,
    tie_word_embeddings=False,
    num_hidden_layers=4,
    layer_types=["mamba", "attention", "mamba", "mamba"],
    intermediate_size=64,
    shared_intermediate_size=128,
    num_local_experts=4,
    num_experts_per_tok=2,
    mamba_n_heads=4,
    mamba_d_head=64,
    mamba_d_state=16,
    mamba_n_groups=1,
    mamba_d_conv=4,
    mamba_expand=2,
    position_embedding_type="rope",
)

_WRITE = """
import json, sys, torch
from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM
torch.manual_seed(0)
model = GraniteMoeHybridForCausalLM(GraniteMoeHybridConfig(**json.loads(sys.argv[2])))
model.to(torch.bfloat16).save_pretrained(sys.argv[1])
"""


def write_granite(folder: Path, python: str, timeout_s: float = 300.0) -> Path:
    """The model folder (config.json, model.safetensors, tokenizer) written with `python` (the vLLM venv's)."""
    folder.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        [python, "-c", _WRITE, str(folder), json.dumps(CONFIG)], capture_output=True, text=True, timeout=timeout_s
    )
    if r.returncode != 0:
        raise RuntimeError(f"writing the tiny Granite-4.0-H failed ({r.returncode}): {r.stderr[-2000:]}")
    write_tokenizer(folder)
    return folder
