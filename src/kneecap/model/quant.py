"""quantization_config -> the dtype each checkpoint part ships in (names from kneecap.model.weights).

Owns reading torch_dtype / quantization_config and the exclusion lists (modules_to_not_convert, ignore,
exclude_modules); does not count parameters (params.py) or price bytes (weights.py).

What stays unquantized, per scheme (checked against the published configs in tests/model/configs):
  fp8 (DeepSeek-V3, Kimi-K2; weight_block_size [128,128] -> "fp8-block"): every Linear in the decoder layers;
      embeddings, lm_head, norms and the router stay bf16 (the fp8 kernels replace nn.Linear only).
  mxfp4 (gpt-oss): only the routed experts; modules_to_not_convert lists self_attn, mlp.router,
      embed_tokens and lm_head.
  compressed-tensors (Kimi-K2.5 INT4 pack-quantized, NVFP4 / FP8 exports): Linear layers not matched by
      `ignore` (exact names or "re:" regexes); Kimi-K2.5 ignores self_attn, shared_experts, dense mlp and
      lm_head, so only the routed experts are INT4.
  modelopt (NVIDIA NVFP4 / FP8 checkpoints): Linear layers not matched by exclude_modules (glob patterns).
  awq / gptq: decoder Linear layers; embeddings and lm_head stay in the model dtype.
Embeddings, norms and routers are never quantized by these schemes.

The KV cache a checkpoint was calibrated for (kv_dtype_from_config): FP8 checkpoints quantize it too, and
vLLM's `--kv-cache-dtype auto` then resolves to fp8 (vllm/utils/torch_utils.py resolve_kv_cache_dtype_string,
added for vLLM issue #34752). Spellings found in published configs:
  NVIDIA ModelOpt, older exports: hf_quant_config.json {"quantization": {"kv_cache_quant_algo": "FP8"}} (resolve.py
      merges it into quantization_config), e.g. nvidia/Llama-3.1-70B-Instruct-FP8; null means not quantized
  ModelOpt, newer exports: quantization_config {"quant_method": "modelopt", "kv_cache_scheme": {"num_bits": 8,
      "type": "float", "dynamic": false}}, e.g. nvidia/Qwen3.5-397B-A17B-NVFP4; some write "kv_cache_scheme": "FP8"
  compressed-tensors (llm-compressor): quantization_config.kv_cache_scheme {"num_bits": 8, "type": "float"};
      null when only the weights are quantized (e.g. moonshotai/Kimi-K2.5)
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping

# A representative module name per part, matched against a scheme's exclusion patterns.
_PROBE_NAMES = {
    "attention": (
        "model.layers.0.self_attn.q_proj",
        "model.layers.0.self_attn.q_a_proj",
        "model.layers.0.self_attn.kv_b_proj",
        "model.layers.0.self_attn.o_proj",
    ),
    "linear_attention": ("model.layers.0.linear_attn.in_proj_qkvz", "model.layers.0.linear_attn.out_proj"),
    "dense_mlp": ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj"),
    "routed_experts": (
        "model.layers.3.mlp.experts.0.gate_proj",
        "model.layers.3.mlp.experts.0.down_proj",
        "model.layers.3.mlp.experts",
    ),
    "shared_experts": ("model.layers.3.mlp.shared_experts.gate_proj", "model.layers.3.mlp.shared_expert.gate_proj"),
    "lm_head": ("lm_head",),
}
_QUANTIZABLE = tuple(_PROBE_NAMES)
_NEVER_QUANTIZED = ("embed", "router", "norms", "other")

TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
KNOWN_QUANT_METHODS = ("fp8", "mxfp4", "compressed-tensors", "modelopt", "awq", "gptq")


def model_dtype(cfg: Mapping) -> str:
    """The unquantized dtype: torch_dtype (or the newer `dtype`), bf16 when absent."""
    raw = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    return TORCH_DTYPES.get(str(raw).replace("torch.", ""), "bf16")


def part_dtypes_from_config(cfg: Mapping, parts: Mapping[str, int]) -> tuple[dict[str, str], list[str]]:
    """The dtype of each part (`parts`: part -> parameter count) and notes for the user.

    `cfg` holds torch_dtype and quantization_config; parts with no parameters are left out of the notes.
    """
    base = model_dtype(cfg)
    dtypes = dict.fromkeys(parts, base)
    qc = cfg.get("quantization_config")
    if not qc:
        return dtypes, []
    method = str(qc.get("quant_method", "")).lower()
    if method == "fp8":
        quantized = "fp8-block" if qc.get("weight_block_size") else "fp8"
        excluded = _Exclusions(qc.get("modules_to_not_convert") or qc.get("ignored_layers") or [], style="substring")
        lm_head_default = False
    elif method == "mxfp4":
        quantized = "mxfp4"
        excluded = _Exclusions(qc.get("modules_to_not_convert") or [], style="glob")
        # gpt-oss: only the MoE experts are MXFP4 (the scheme quantizes expert tensors only)
        excluded.forced.update(("attention", "linear_attention", "dense_mlp", "shared_experts", "lm_head"))
        lm_head_default = False
    elif method == "compressed-tensors":
        quantized = _compressed_tensors_dtype(qc)
        excluded = _Exclusions(qc.get("ignore") or [], style="regex")
        lm_head_default = True
    elif method == "modelopt":
        algo = str(qc.get("quant_algo", "")).upper()
        quantized = "nvfp4" if "FP4" in algo else "fp8"
        excluded = _Exclusions(qc.get("exclude_modules") or [], style="glob")
        lm_head_default = True
    elif method in ("awq", "gptq"):
        quantized = method if int(qc.get("bits", 4)) == 4 else "int8"
        excluded = _Exclusions(qc.get("modules_to_not_convert") or [], style="substring")
        lm_head_default = False
    else:
        return dtypes, [
            f"quantization_config quant_method {method!r} is not modelled (known: "
            f"{', '.join(KNOWN_QUANT_METHODS)}); weights priced as {base} — pass --weight-dtype"
        ]
    for part in _QUANTIZABLE:
        if part not in dtypes:
            continue
        if part == "lm_head" and not lm_head_default:
            continue  # fp8 / mxfp4 / awq / gptq checkpoints keep lm_head in the model dtype
        if not excluded.excludes(part):
            dtypes[part] = quantized
    for part in _NEVER_QUANTIZED:
        if part in dtypes:
            dtypes[part] = base
    present = [p for p in _QUANTIZABLE if parts.get(p)]
    kept = [p for p in present if dtypes[p] == base]
    note = f"quantization_config: {method} -> {quantized} for " + ", ".join(
        p for p in present if dtypes[p] == quantized
    )
    if kept:
        note += f"; kept in {base}: " + ", ".join(kept) + ", embeddings, norms, router"
    return dtypes, [note]


def _compressed_tensors_dtype(qc: Mapping) -> str:
    groups = qc.get("config_groups") or {}
    for group in groups.values():
        weights = (group or {}).get("weights") or {}
        bits, kind = int(weights.get("num_bits", 8)), str(weights.get("type", "int")).lower()
        if bits == 4 and kind == "float":
            return "nvfp4"
        if bits == 4:  # group scales in bf16, symmetric (no zero point): group 32 -> 4 + 16/32 bits
            return "int4-g32" if weights.get("group_size") == 32 and weights.get("symmetric", True) else "int4"
        if bits == 8 and kind == "float":
            return "fp8"
        if bits == 8:
            return "int8"
    return "int4" if "pack" in str(qc.get("format", "")) else "fp8"


class _Exclusions:
    def __init__(self, patterns: list[str], style: str):
        self.patterns = list(patterns)
        self.style = style
        self.forced: set[str] = set()

    def excludes(self, part: str) -> bool:
        return part in self.forced or any(
            self._match(pat, name) for name in _PROBE_NAMES[part] for pat in self.patterns
        )

    def _match(self, pattern: str, name: str) -> bool:
        pattern = str(pattern)
        if self.style == "regex" or pattern.startswith("re:"):
            expr = pattern[3:] if pattern.startswith("re:") else pattern
            try:
                return re.fullmatch(expr, name) is not None or (not pattern.startswith("re:") and expr == name)
            except re.error:
                return expr == name
        if self.style == "glob":
            return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, f"*{pattern}*")
        return pattern in name  # substring: HF fp8 / awq match module names that contain the entry


def kv_dtype_from_config(cfg: Mapping) -> tuple[str | None, list[str]]:
    """The KV-cache dtype the checkpoint's quantization_config asks for ("fp8"), or None; and notes for the user."""
    qc = cfg.get("quantization_config")
    if not isinstance(qc, Mapping):
        return None, []
    algo = qc.get("kv_cache_quant_algo")
    scheme = qc.get("kv_cache_scheme")
    if algo is None and isinstance(scheme, str):
        algo = scheme
    if algo is not None:
        said, fp8 = f"kv_cache_quant_algo {algo!r}", str(algo).upper() == "FP8"
    elif isinstance(scheme, Mapping):
        bits, kind = scheme.get("num_bits"), str(scheme.get("type", "")).lower()
        said, fp8 = f"kv_cache_scheme {{num_bits: {bits}, type: {kind}}}", bits == 8 and kind == "float"
    else:
        return None, []
    if fp8:
        return "fp8", [
            f"quantization_config {said}: the checkpoint ships FP8 KV-cache scales, and vLLM's "
            "--kv-cache-dtype auto then caches fp8 (1 B per element)"
        ]
    return None, [f"quantization_config {said} is not modelled; KV cache left at the engine default — pass --kv-dtype"]


def modelopt_attention_bytes(cfg: Mapping, modules: Mapping[str, int], num_layers: int) -> tuple[int, str] | None:
    """A ModelOpt checkpoint's attention bytes read per projection: `modules` (name under self_attn -> parameters
    of one layer) over num_layers layers, each Linear at the quantized dtype unless exclude_modules names it in that
    layer (model.layers.{i}.self_attn.{name}), norms at the model dtype; with a note. None when the checkpoint is
    not ModelOpt or its exclusions take every projection or none (the part then has one dtype)."""
    from kneecap.model.weights import weight_bytes

    qc = cfg.get("quantization_config")
    if not isinstance(qc, Mapping) or str(qc.get("quant_method", "")).lower() != "modelopt":
        return None
    quantized = "nvfp4" if "FP4" in str(qc.get("quant_algo", "")).upper() else "fp8"
    base = model_dtype(cfg)
    excluded = _Exclusions(qc.get("exclude_modules") or [], style="glob")
    total, kept, quant = 0, set(), set()
    for name, n in modules.items():
        for i in range(num_layers):
            plain = "norm" in name or any(
                excluded._match(pat, f"model.layers.{i}.self_attn.{name}") for pat in excluded.patterns
            )
            total += weight_bytes(n, base if plain else quantized)
            if "norm" not in name:
                (kept if plain else quant).add(name)
    if not quant or not kept - quant:
        return None
    return total, (
        f"exclude_modules read per projection: attention {', '.join(sorted(quant))} at {quantized}, "
        f"{', '.join(sorted(kept - quant))} kept in {base}"
    )
