"""Which candidates quantize below the checkpoint, and what vouches for their output: with --behaviour-gate cases
they are marked needs_behaviour_gate (their `kneecap run` plans carry the cases, so a run rejects a candidate whose
answers change); without, behaviour_unchecked (the answer assumes their output is acceptable).

"Below the checkpoint": weights stored in fewer bits than the checkpoint ships (kneecap.model.weights.weight_bits),
or a KV cache of fewer bytes per element than the engine's default for the checkpoint (the KV dtype its quantization
config calibrated, else its 16-bit dtype, as vLLM's kv_cache_dtype "auto"; kneecap.plan.build does the same).
Owns the marks; the cases' shape is the load-plan schema's (checked by the command line).
"""

from __future__ import annotations

from functools import lru_cache

from kneecap.model.kv import kv_dtype_bytes
from kneecap.model.weights import weight_bits


def quantized(model, weight_dtype: str, kv_dtype: str) -> list[str]:
    """["weights"], ["kv"], both or neither: what this candidate stores below the checkpoint's own dtype."""
    ckpt_w = (model.weight_dtype or "bf16").lower()
    ckpt_kv = (model.kv_dtype or (model.weight_dtype if model.weight_dtype in ("bf16", "fp16") else "bf16")).lower()
    out = []
    if weight_bits(weight_dtype) < weight_bits(ckpt_w):
        out.append("weights")
    if kv_dtype_bytes(kv_dtype) < kv_dtype_bytes(ckpt_kv):
        out.append("kv")
    return out


@lru_cache(maxsize=64)
def quantized_for(model_spec: str, weight_dtype: str, kv_dtype: str) -> tuple[str, ...]:
    from kneecap.model import load_model

    return tuple(quantized(load_model(model_spec), weight_dtype, kv_dtype))


def mark(doc: dict, cases: list[dict] | None, source: str | None = None) -> None:
    """Mark every candidate and point of recommend.json; doc["behaviour_gate"] says what was given."""
    for lst in ("candidates", "points", "frontier", "throughput_frontier"):
        for c in doc.get(lst) or []:
            q = bool(c.get("quantized_below_checkpoint"))
            c["needs_behaviour_gate"] = q and bool(cases)
            c["behaviour_unchecked"] = q and not cases
    if doc.get("best") is not None and doc.get("candidates"):
        doc["best"] = doc["candidates"][0]
    doc["behaviour_gate"] = None if not cases else {"file": source, "cases": [c["name"] for c in cases]}
