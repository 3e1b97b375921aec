"""Weight bytes: parameters x bytes per parameter for a weight dtype, scale overhead included.

Owns the bits-per-parameter of every weight dtype name (Hugging Face checkpoint formats and every
llama.cpp GGUF tensor and file type); does not decide which part ships in which dtype (quant.py).

Bits per parameter, with the scale overhead of each format (block/group scales amortised):
  bf16, fp16          16
  fp8                  8      per-tensor scale (the seed-003 convention: 70e9 params -> 70e9 bytes)
  fp8-block            8.002  DeepSeek-V3 style: one fp32 scale per 128x128 block (32/16384 bits)
  int8                 8      per-channel scales, negligible
  int4, awq, gptq      4.156  group size 128: one fp16 scale (+ 4-bit zero point) per group (20/128)
  int4-g32             4.5    compressed-tensors pack-quantized, symmetric, group 32: one bf16 scale per 32 (16/32)
                              (Kimi-K2.5's routed experts: config_groups weights num_bits 4, group_size 32, symmetric)
  nvfp4                4.5    one fp8 (E4M3) scale per 16 elements (8/16) + a per-tensor fp32 (negligible)
  mxfp4                4.25   one 8-bit E8M0 scale per 32 elements (8/32), OCP Microscaling spec v1.0
Sources: NVIDIA "Introducing NVFP4" (block of 16, FP8 E4M3 scale); OCP MX Formats Specification
v1.0 (block of 32, E8M0 scale); AutoAWQ / GPTQ default group_size 128; DeepSeek-V3 config
`weight_block_size: [128, 128]`.

llama.cpp (GGUF) names, lower case as llama.cpp prints them ("q8_0", "q4_k", "iq2_xxs", "tq1_0", ...):
  a tensor type       type_size x 8 / block_size bits, from the `gguf` package's GGML_QUANT_SIZES
                      (e.g. q8_0: 34 B per 32 weights = 8.5; q4_k: 144 B per 256 = 4.5)
  a file type         (general.file_type, e.g. "q4_k_m", "q3_k_s", "iq3_xs", "mxfp4_moe"): the bits of the file
                      type's default tensor type, llama.cpp src/llama-quant.cpp llama_model_quantize_impl
                      (`default_type`). A mix such as Q4_K_M keeps some tensors at higher types (q6_k), so for a
                      GGUF file kneecap takes the exact bytes from its tensor table; this figure only prices a
                      --weight-dtype choice for a model that is not a GGUF. "iq2_s" names both a file type
                      (default tensor type iq2_xs) and a tensor type; as a dtype name it is the tensor type.
The gguf package (and numpy with it) is imported only when such a name is looked up.
"""

from __future__ import annotations

from kneecap.errors import KneecapError

WEIGHT_BITS_PER_PARAM: dict[str, float] = {
    "bf16": 16.0,
    "fp16": 16.0,
    "fp32": 32.0,
    "fp8": 8.0,
    "fp8-block": 8.0 + 32.0 / (128 * 128),
    "int8": 8.0,
    "int4": 4.0 + 20.0 / 128,
    "int4-g32": 4.0 + 16.0 / 32,
    "awq": 4.0 + 20.0 / 128,
    "gptq": 4.0 + 20.0 / 128,
    "nvfp4": 4.0 + 8.0 / 16,
    "mxfp4": 4.0 + 8.0 / 32,
}

# llama.cpp file type -> the tensor type it quantizes to by default, where the two names differ
# (src/llama-quant.cpp llama_model_quantize_impl: `case LLAMA_FTYPE_MOSTLY_X: default_type = GGML_TYPE_Y`).
# Every other file type quantizes to the tensor type of its own name once the _s / _m / _l mix suffix is dropped.
_FILE_TYPE_DEFAULT = {
    "all_f32": "f32",
    "mxfp4_moe": "mxfp4",
    "iq3_xs": "iq3_s",
    "iq3_m": "iq3_s",
    "iq2_s": "iq2_xs",
    "iq2_m": "iq2_s",
}
_MIX_SUFFIXES = ("_s", "_m", "_l")


def ggml_tensor_types() -> dict[str, tuple[int, int]]:
    """llama.cpp tensor type name (lower case) -> (block_size elements, type_size bytes), from the gguf package."""
    from gguf.constants import GGML_QUANT_SIZES

    return {t.name.lower(): (int(block), int(size)) for t, (block, size) in GGML_QUANT_SIZES.items()}


def ggml_file_types() -> dict[str, str]:
    """llama.cpp file type name (lower case, "mostly_" dropped, e.g. "q4_k_m") -> its default tensor type."""
    from gguf.constants import LlamaFileType

    tensor_types = ggml_tensor_types()
    out = {}
    for ftype in LlamaFileType:
        name = ftype.name.lower().removeprefix("mostly_")
        base = _FILE_TYPE_DEFAULT.get(name) or (name if name in tensor_types else None)
        if base is None and name.endswith(_MIX_SUFFIXES) and name[:-2] in tensor_types:
            base = name[:-2]
        if base in tensor_types:
            out[name] = base
    return out


def file_type_name(file_type: int) -> str | None:
    """general.file_type (llama_ftype) -> its name as kneecap uses it ("f16", "q8_0", "q4_k_m"), None if unknown."""
    from gguf.constants import LlamaFileType

    try:
        name = LlamaFileType(int(file_type)).name.lower()
    except ValueError:
        return None
    if name == "guessed":
        return None
    return "f32" if name == "all_f32" else name.removeprefix("mostly_")


def _gguf_bits(dtype: str) -> float | None:
    if not dtype.replace("_", "").isalnum():
        return None
    try:
        tensor_types = ggml_tensor_types()
        base = dtype if dtype in tensor_types else ggml_file_types().get(dtype)
    except ImportError:  # pragma: no cover - gguf is a declared dependency
        return None
    if base not in tensor_types:
        return None
    block, size = tensor_types[base]
    return size * 8.0 / block


def weight_bits(dtype: str) -> float:
    """Bits per parameter (scale overhead included) for a --weight-dtype name."""
    name = str(dtype).lower()
    bits = WEIGHT_BITS_PER_PARAM.get(name)
    if bits is None:
        bits = _gguf_bits(name)
    if bits is None:
        raise KneecapError(
            f"unknown weight dtype {dtype!r}",
            f"use one of {', '.join(WEIGHT_BITS_PER_PARAM)}, or a llama.cpp type such as f16, q8_0, q4_k_m, iq4_xs",
        )
    return bits


def weight_bytes(params: int, dtype: str) -> int:
    """Bytes of `params` parameters stored as `dtype` (whole model, before sharding), rounded up."""
    bits = weight_bits(dtype)
    return -(-int(params * bits) // 8) if bits != int(bits) else params * int(bits) // 8
