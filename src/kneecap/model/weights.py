"""Weight bytes: parameters x bytes per parameter for a weight dtype, scale overhead included.

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


def weight_bits(dtype: str) -> float:
    """Bits per parameter (scale overhead included) for a --weight-dtype name."""
    try:
        return WEIGHT_BITS_PER_PARAM[dtype.lower()]
    except KeyError:
        raise KneecapError(f"unknown weight dtype {dtype!r}", f"use one of {', '.join(WEIGHT_BITS_PER_PARAM)}") from None


def weight_bytes(params: int, dtype: str) -> int:
    """Bytes of `params` parameters stored as `dtype` (whole model, before sharding), rounded up."""
    bits = weight_bits(dtype)
    return -(-int(params * bits) // 8) if bits != int(bits) else params * int(bits) // 8
