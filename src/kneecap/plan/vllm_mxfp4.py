"""The bytes vLLM gives an MXFP4 MoE checkpoint's experts (gpt-oss) when its Marlin kernel runs them (pure).

Owns which MXFP4 MoE backend vLLM picks for a GPU at a release, as far as kneecap models it, and the expert tensors
the Marlin backend allocates. Does not own the checkpoint's bytes (kneecap.model.params) nor the pool formula
(engines.py, which adds these bytes to what vLLM logs as "Model loading took X GiB").

Rules read in vLLM's published sources (vllm/model_executor/layers/quantization/mxfp4.py; from 0.19 the backend
choice lives in vllm/model_executor/layers/fused_moe/oracle/mxfp4.py):

- backend. 0.10.2 and 0.11.0 (mxfp4.py get_mxfp4_backend, 0.10.2 :54-102, 0.11.0 :59-105): Blackwell (SM100) with
  FlashInfer gets a FlashInfer backend; Hopper gets FlashInfer only with VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1;
  otherwise Marlin when the compute capability is below 9.0, or the optional `triton_kernels` package is missing, or
  torch is older than 2.8, else Triton. `triton_kernels` is in neither release's requirements nor its Docker image
  (requirements/cuda.txt, docker/Dockerfile), so a default install runs Marlin on Hopper as well as on Ampere and
  Ada. From 0.12.0 vLLM builds triton_kernels into its wheel (cmake/external_projects/triton_kernels.cmake,
  vllm.third_party.triton_kernels) and Triton needs 9.0 <= capability < 11.0 (0.12.0 mxfp4.py :153-166; 0.19.0
  gpt_oss_triton_kernels_moe.py :555-564), so Hopper runs Triton and Ampere / Ada keep Marlin; 0.19.0 and 0.33.0
  try FlashInfer TRT-LLM, Triton, FlashInfer CUTLASS (9.0, 10.x, 11.x, 12.x only) then Marlin
  (oracle/mxfp4.py _get_priority_backends, 0.19.0 :169-184; 0.33.0 _get_priority_backends_for_gpt_oss :402-425).
- Marlin's padding (0.10.2 mxfp4.py :184-201, 0.11.0 :189-200; 0.19.0 oracle/mxfp4.py :376-385, 0.33.0 :865-870):
  "the moe marlin kernel requires that for each linear n % 256 == 0 and k % 128 == 0", so the intermediate size per
  tensor-parallel rank is rounded up to 128 and the hidden size to 256 before the expert tensors are created:
  w13 [experts, 2 x I, H / 2] uint8 with scales [experts, 2 x I, H / 32] uint8 and bias [experts, 2 x I] bf16, w2
  [experts, H, I / 2] with scales [experts, H, I / 32] and bias [experts, H] (create_weights, 0.10.2 :222-292).
  prepare_moe_fp4_layer_for_marlin repacks them at the same sizes (weights int32-packed, scales float8_e8m0, bias in
  the model's dtype: utils/marlin_utils_fp4.py :195-297). gpt-oss's 2,880 becomes 2,944 (intermediate) and 3,072
  (hidden): +5.13 GiB on gpt-oss-120b, +0.86 GiB on gpt-oss-20b.

Not modelled (no bytes added, the plan says which backend it assumed): Triton on Hopper (0.12 on, or 0.10-0.11 with
triton_kernels installed), whose published loads are above the checkpoint too (gpt-oss-120b 64.38 GiB on an H100,
vllm-project/vllm issue 33155, 0.14.1, against 60.74 GiB of tensors), FlashInfer on Blackwell (pads the intermediate
size to 256 and the hidden size to 256 in 0.10.2), AMD GPUs, and Marlin's per-layer workspace (a few KiB).
"""

from __future__ import annotations

from kneecap.deployment import Deployment
from kneecap.errors import KneecapError

MARLIN_INTERMEDIATE_ALIGN = 128  # round_up(intermediate_size_per_partition, 128)
MARLIN_HIDDEN_ALIGN = 256  # round_up(hidden_size, 256) (128 on Intel XPU, not modelled)
MXFP4_BLOCK = 32  # elements per e8m0 scale
TRITON_BUNDLED_FROM = (0, 12)  # vLLM builds triton_kernels into its wheel: Hopper runs Triton by default
# compute capability (major) of the catalog's NVIDIA GPUs (NVIDIA's CUDA GPUs list: A100 8.0, L4 / L40S / RTX 4090 8.9,
# H100 / H200 9.0, B200 / GB200 10.0, RTX 5090 / RTX PRO 6000 Blackwell 12.0); names not listed: not an NVIDIA GPU
_CAPABILITY_MAJOR = {
    "a100": 8,
    "l4": 8,
    "l40s": 8,
    "rtx-4090": 8,
    "h100": 9,
    "h200": 9,
    "b200": 10,
    "gb200": 10,
    "rtx-5090": 12,
    "rtx-pro-6000": 12,
}


def capability_major(gpu_name: str) -> int | None:
    """The CUDA compute capability's major number of a catalog GPU (a100-80 -> 8, h100-sxm -> 9); None: not NVIDIA."""
    for prefix, major in sorted(_CAPABILITY_MAJOR.items(), key=lambda kv: -len(kv[0])):
        if gpu_name == prefix or gpu_name.startswith(prefix + "-"):
            return major
    return None


BACKENDS = ("marlin", "triton")  # the kernels a caller may name instead of the release's default


def check_backend(chosen: str) -> None:
    """A KneecapError unless `chosen` is a kernel a caller may name (BACKENDS)."""
    if chosen not in BACKENDS:
        raise KneecapError(f"unknown MXFP4 MoE backend {chosen!r}", f"use one of {', '.join(BACKENDS)}")


def mxfp4_backend(gpu_name: str, version: tuple[int, ...], chosen: str | None = None) -> str:
    """The MXFP4 MoE backend vLLM picks at this release on this GPU: "marlin", "triton", "flashinfer" or "other" (AMD
    and the GPUs kneecap has not placed). `chosen` ("marlin" | "triton") names the one a server ran instead of the
    default (a 0.10 / 0.11 install with triton_kernels on Hopper runs Triton; VLLM_MXFP4_USE_MARLIN=1 forces Marlin)."""
    if chosen is not None:
        check_backend(chosen)
        major = capability_major(gpu_name)
        if chosen == "triton" and major is not None and not 9 <= major < 11:
            raise KneecapError(
                f"vLLM does not run MXFP4 experts with Triton on {gpu_name} (compute capability {major}.x; its Triton "
                "MoE kernels need 9.0 to 10.x)",
                "leave the MoE backend to the release's default, or name marlin",
            )
        return chosen
    major = capability_major(gpu_name)
    if major is None:
        return "other"
    if major < 9:
        return "marlin"
    if major == 9:
        return "triton" if version[:2] >= TRITON_BUNDLED_FROM else "marlin"
    if major == 10:
        return "flashinfer"
    return "other"  # consumer Blackwell: Marlin, Triton or FlashInfer CUTLASS by release, not read for every one


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def expert_tensor_bytes(experts: int, hidden: int, intermediate: int) -> int:
    """Bytes of one MoE layer's MXFP4 expert tensors as vLLM creates them: w13 and w2 weights (two FP4 values a
    byte), their e8m0 scales (one a block of 32) and their bf16 biases."""
    w13 = 2 * intermediate * hidden // 2 + 2 * intermediate * hidden // MXFP4_BLOCK + 2 * intermediate * 2
    w2 = hidden * intermediate // 2 + hidden * intermediate // MXFP4_BLOCK + hidden * 2
    return experts * (w13 + w2)


def is_mxfp4_moe(deployment: Deployment) -> bool:
    """A checkpoint whose routed experts ship as MXFP4 (gpt-oss), planned at its own dtypes."""
    from kneecap.model.params import part_dtypes

    m = deployment.model
    return (
        m.is_moe
        and bool(m.intermediate_size)
        and deployment.params_override is None
        and deployment.weight_dtype == "mxfp4"
        and part_dtypes(m).get("routed_experts") == "mxfp4"
    )


def marlin_extra_bytes(deployment: Deployment, version: tuple[int, ...], chosen: str | None = None) -> int:
    """Bytes per GPU vLLM's Marlin expert tensors hold beyond the checkpoint's expert bytes in kneecap's weights
    (0 where vLLM does not run this model's experts through Marlin)."""
    if not is_mxfp4_moe(deployment) or mxfp4_backend(deployment.gpu.name, version, chosen) != "marlin":
        return 0
    from kneecap.model.params import weight_bytes_by_part

    m = deployment.model
    shard = max(deployment.tp // max(deployment.ep, 1), 1)  # ranks each expert's intermediate size is split over
    experts_per_gpu = m.num_experts // max(deployment.ep, 1)
    per_rank = m.intermediate_size // shard
    padded = expert_tensor_bytes(
        experts_per_gpu,
        _round_up(m.hidden_size, MARLIN_HIDDEN_ALIGN),
        _round_up(per_rank, MARLIN_INTERMEDIATE_ALIGN),
    )
    layers = m.num_moe_layers or m.num_hidden_layers
    engine = padded * layers // deployment.pp
    ledger = -(-weight_bytes_by_part(m)["routed_experts"] // deployment.num_gpus)
    return max(engine - ledger, 0)


def describe(deployment: Deployment, version: tuple[int, ...], extra_bytes: int, chosen: str | None = None) -> str:
    """The weights-line words for the expert bytes (empty when the model's experts are not MXFP4)."""
    if not is_mxfp4_moe(deployment):
        return ""
    backend = mxfp4_backend(deployment.gpu.name, version, chosen)
    if backend == "marlin":
        m = deployment.model
        shard = max(deployment.tp // max(deployment.ep, 1), 1)
        inter = m.intermediate_size // shard
        return (
            f"MXFP4 experts as vLLM's Marlin kernel pads them (intermediate "
            f"{inter:,} -> {_round_up(inter, MARLIN_INTERMEDIATE_ALIGN):,}, hidden {m.hidden_size:,} -> "
            f"{_round_up(m.hidden_size, MARLIN_HIDDEN_ALIGN):,}; bf16 biases"
            + (
                "; vLLM's default install: with the triton_kernels package installed it runs Triton instead)"
                if capability_major(deployment.gpu.name) == 9 and chosen is None
                else ")"
            )
        )
    reason = {
        "triton": (
            "Triton kernels, as named"
            if chosen
            else "vLLM runs MXFP4 experts on Hopper through its Triton kernels from 0.12"
        )
        + " (not modelled: the published loads are above the checkpoint's bytes)",
        "flashinfer": "vLLM runs MXFP4 experts on Blackwell through FlashInfer, which pads them (not modelled)",
        "other": "the MXFP4 expert backend vLLM picks on this GPU is not modelled",
    }[backend]
    return f"MXFP4 experts at the checkpoint's bytes ({reason})"
