"""Tiny random-weight sliding-window models for vLLM's CPU build: Gemma-2 style (sliding and full layers
alternate), Gemma-3 style (5 sliding : 1 full) and gpt-oss style (alternating 64-token window, MoE).

The weights are written by transformers' own model classes (save_pretrained), run by the vLLM venv's python (it has
torch and transformers; kneecap's venv has neither), so the tensor names are the ones vLLM's loaders read. The
tokenizer is tiny_llama's 260-token byte-level one. Each model has 2 KV heads of 64 and a 64-token window, so
a 1 GiB CPU pool is 16,384 blocks of 128 tokens and the sliding layers' blocks per request are what vLLM counts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tiny_llama import BOS_ID, EOS_ID, MAX_POSITIONS, VOCAB_SIZE, write_tokenizer

WINDOW = 64
_COMMON = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=128,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=MAX_POSITIONS,
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
    pad_token_id=259,
    sliding_window=WINDOW,
)
# kind -> (transformers config class, model class, config)
MODELS = {
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(_COMMON, intermediate_size=256, num_hidden_layers=4)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(_COMMON, intermediate_size=256, num_hidden_layers=6)),
    "gpt-oss": (
        "GptOssConfig",
        "GptOssForCausalLM",
        dict(_COMMON, intermediate_size=64, num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2),
    ),
}

_WRITE = """
import json, sys, torch, transformers
torch.manual_seed(0)
config = getattr(transformers, sys.argv[2])(**json.loads(sys.argv[4]))
model = getattr(transformers, sys.argv[3])(config)
model.to(torch.bfloat16).save_pretrained(sys.argv[1])
"""


def write_sliding(kind: str, folder: Path, python: str, timeout_s: float = 300.0) -> Path:
    """The model folder of MODELS[kind] (config.json, model.safetensors, tokenizer) written with `python`."""
    config_cls, model_cls, config = MODELS[kind]
    folder.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        [python, "-c", _WRITE, str(folder), config_cls, model_cls, json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if r.returncode != 0:
        raise RuntimeError(f"writing the tiny {kind} failed ({r.returncode}): {r.stderr[-2000:]}")
    write_tokenizer(folder)
    return folder
