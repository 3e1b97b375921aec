"""vLLM V1's non-torch memory increase over its start-up profile, as published measurements (pure).

Owns the figure engine mode subtracts as "non-torch memory" when the user gives none, and the words that say where
it came from. Does not own the pool formula (engines.py) nor the activation peak (profile_peak.py).

What vLLM counts (v1/worker/gpu_worker.py init_device and determine_available_memory, utils/mem_utils.py
memory_profiling; read in the 0.12.0-0.14.0, 0.16.0, 0.18.0, 0.20.0, 0.25.0, 0.30.0 and 0.33.0 sdists): the
worker initialises the distributed environment (torch's and vLLM's NCCL communicators, the custom all-reduce
buffers) and only then takes its first memory snapshot ("Now take memory snapshot after NCCL is initialized");
non-torch memory is the rise of (used device memory - torch's reserved memory) from that snapshot to the end of the
profile run. So the CUDA context, the communicators' set-up and the custom all-reduce buffers are outside it (they
lower the free memory the snapshot reads; vLLM's budget is gpu_memory_utilization x total all the same), and what
lands in it is what the profile run allocates outside torch's allocator the first time: kernel images loaded on
first use (CUDA's lazy module loading), library handles and workspaces, and NCCL's connection buffers for the
algorithms the first large all-reduce uses (NCCL connects them at run time, NCCL_RUNTIME_CONNECT). kneecap has no
derivation of that sum from the model and the GPU (the TP 2 figure grew from 0.54 GiB at 0.11.0 to 2.07 GiB at
0.19.0 with the same GPU, and the FlashInfer all-reduce-fusion workspace of 0.18+, 64 MiB at TP 2 on sm90 by
compilation/passes/fusion/allreduce_rms_fusion.py FI_ALLREDUCE_FUSION_MAX_SIZE_MB, is far from the difference), so it
uses the figures vLLM logged, where a record exists for that GPU, TP and release:

  vLLM 0.11.0 on one H100 (79.18 GiB as vLLM reads it), DEBUG line "non-torch forward increase memory", published
  in llm-d-incubation/llm-d-planner docs/empirical-vllm-memory-results.md (Summary table):
    TP 1: Llama-3.1-8B 0.13, Qwen3-0.6B 0.13, Qwen3-32B 0.14, gpt-oss-20b 0.13, gpt-oss-120b 0.13,
    Mistral-Small-3.2-24B 0.14 GiB; TP 2: Qwen3-32B 0.54, Llama-3.3-70B-FP8 0.55 GiB
  vLLM 0.19.0 on H100s (79.19 GiB), published in the same repository's
  docs/accuracy/vllm-v0.19.0-accuracy-report.md ("Sensitivity: Tensor Parallelism" table, "Actual non-torch"):
    Llama-3.1-8B-Instruct TP 1 / 2 / 4: 0.25 / 2.07 / 2.13 GiB; Qwen2.5-7B-Instruct: 0.24 / 2.06 / 2.13 GiB
  Each default comes from some of those records and is checked on the others it did not come from
  (tests/plan/test_plan_non_torch.py, the `derived_from` / `held_out` fields below).

A release takes the measurement of the newest measured release at or below it (0.11-0.18: 0.11.0's; 0.19-0.33:
0.19.0's), the snapshot point being the same in every release read (0.12.0-0.33.0). Only 0.11.0 and 0.19.0 are
measured: the figure printed names the release it was measured on. It is applied on the GPUs of the measurements
(H100 SXM and PCIe: the records do not say which) at the measured TP; elsewhere engine mode keeps 0 and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from kneecap.units import GiB

NEWEST_RELEASE = (0, 33)  # the newest release whose snapshot point was read
MEASURED_GPUS = ("h100-sxm", "h100-pcie")
OVERRIDE = "pass the engine's logged figure with --non-torch-gib"
SOURCES = {
    (0, 11): "llm-d-planner docs/empirical-vllm-memory-results.md",
    (0, 19): "llm-d-planner docs/accuracy/vllm-v0.19.0-accuracy-report.md",
}


@dataclass(frozen=True)
class NonTorchDefault:
    """One published default: the release and TP it was measured at, its size, the records it was derived from and
    those it was checked on (ids in tests/plan/data/engine_startup_logs.json)."""

    release: tuple[int, int]
    tp: int
    gib: float
    derived_from: tuple[str, ...]
    held_out: tuple[str, ...]


DEFAULTS = (
    NonTorchDefault(
        (0, 11),
        1,
        0.13,
        ("llama-3.1-8b-h100-v0.11", "qwen3-0.6b-h100-v0.11"),
        (
            "qwen3-32b-h100-v0.11",
            "gpt-oss-20b-h100-v0.11",
            "gpt-oss-120b-h100-v0.11",
            "mistral-small-3.2-24b-h100-v0.11",
        ),
    ),
    NonTorchDefault((0, 11), 2, 0.54, ("qwen3-32b-2xh100-v0.11",), ("llama-3.3-70b-fp8-2xh100-v0.11",)),
    NonTorchDefault((0, 19), 1, 0.25, ("llama-3.1-8b-h100-v0.19",), ("qwen2.5-7b-h100-v0.19",)),
    NonTorchDefault((0, 19), 2, 2.07, ("llama-3.1-8b-2xh100-v0.19",), ("qwen2.5-7b-2xh100-v0.19",)),
    NonTorchDefault((0, 19), 4, 2.13, ("llama-3.1-8b-4xh100-v0.19",), ("qwen2.5-7b-4xh100-v0.19",)),
)


def measured_release(version: tuple[int, ...]) -> tuple[int, int] | None:
    """The newest measured release at or below `version` (None below 0.11 or above the newest read)."""
    if version[:2] > NEWEST_RELEASE:
        return None
    below = [m for m in SOURCES if m <= version[:2]]
    return max(below) if below else None


def default_for(version: tuple[int, ...], tp: int) -> NonTorchDefault | None:
    """The default measured at this TP on the release `version` takes its figure from (None: none)."""
    release = measured_release(version)
    return next((d for d in DEFAULTS if d.release == release and d.tp == tp), None)


def vllm_non_torch(gpu_name: str, tp: int, version: tuple[int, ...]) -> tuple[int, str]:
    """(bytes, where the figure came from) of vLLM's non-torch memory for this GPU, TP and release: a published
    measurement where one exists, else 0 with the reason."""
    release = measured_release(version)
    if release is None:
        return 0, f"assumed 0 (not measured on vLLM {'.'.join(map(str, version))}; {OVERRIDE})"
    if gpu_name not in MEASURED_GPUS:
        return 0, f"assumed 0 (not measured on {gpu_name}; {OVERRIDE})"
    d = default_for(version, tp)
    if d is None:
        return 0, f"assumed 0 (not measured at TP {tp}; {OVERRIDE})"
    on = "" if release == version[:2] else f"; vLLM {version[0]}.{version[1]} itself not measured"
    return int(d.gib * GiB), (
        f"{d.gib:g} GiB, logged by vLLM {release[0]}.{release[1]}.0 at TP {tp} on an H100 ({SOURCES[release]}"
        f"{on}; pass --non-torch-gib to override)"
    )
