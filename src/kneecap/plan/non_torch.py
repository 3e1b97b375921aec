"""vLLM V1's non-torch memory increase over its start-up profile, as published measurements (pure).

Owns the figure engine mode subtracts as "non-torch memory" when the user gives none, and the words that say where
it came from. Does not own the pool formula (engines.py) nor the activation peak (profile_peak.py).

What vLLM counts (v1/worker/gpu_worker.py init_device and determine_available_memory, utils/mem_utils.py
memory_profiling; read in the 0.12.0-0.14.0, 0.16.0, 0.18.0, 0.20.0, 0.25.0, 0.30.0 and 0.33.0 sdists and the 0.34.0
wheel, where init_device takes the snapshot at v1/worker/gpu_worker.py:538-549, after the communicators and the cuBLAS
handles, as in 0.33.0): the
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
  vLLM 0.19.0 on H100s (79.19 GiB), the start-up DEBUG logs of 59 deployments published in the same repository
  (accuracy/results/v0.19.0/logs, commit d3121e05; 57 without pipeline parallelism), "non-torch forward increase
  memory": TP 1 (42 logs, 27 models) 0.24-0.27 GiB, but 0.46 GiB for the three Granite 3.x language models;
  TP 2 (10 logs) 2.06-2.11 GiB; TP 4 (5 logs) 2.13-2.21 GiB, the larger models at the top of each range
  Each default is one record's figure (`derived_from`) and is checked on every other record of its release and TP
  (tests/plan/test_plan_non_torch.py): all lie within `spread_gib` of it but the `outliers` named.

A release takes the measurement of the newest measured release at or below it (0.11-0.18: 0.11.0's; 0.19-0.34:
0.19.0's), the snapshot point being the same in every release read (0.12.0-0.34.0). Only 0.11.0 and 0.19.0 are
measured: the figure printed names the release it was measured on. It is applied on the GPUs of the measurements
(H100 SXM and PCIe: the records do not say which) at the measured TP; elsewhere engine mode keeps 0 and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from kneecap.units import GiB

NEWEST_RELEASE = (0, 34)  # the newest release whose snapshot point was read
MEASURED_GPUS = ("h100-sxm", "h100-pcie")
OVERRIDE = "pass the engine's logged figure with --non-torch-gib"
SOURCES = {
    (0, 11): "llm-d-planner docs/empirical-vllm-memory-results.md",
    (0, 19): "llm-d-planner accuracy/results/v0.19.0/logs",
}


@dataclass(frozen=True)
class NonTorchDefault:
    """One published default: the release and TP it was measured at, its size, the record it was derived from (an
    id in tests/plan/data/engine_startup_logs.json), how far the other logged figures of that release and TP lie
    from it (`spread_gib`, the largest distance; every other record of the data file is held out) and the models
    that lie further (`outliers`, with their figure)."""

    release: tuple[int, int]
    tp: int
    gib: float
    derived_from: tuple[str, ...]
    spread_gib: float
    outliers: tuple[tuple[str, str, float], ...] = ()  # (model-name part that picks them, their name, figure)


DEFAULTS = (
    NonTorchDefault((0, 11), 1, 0.13, ("llama-3.1-8b-h100-v0.11", "qwen3-0.6b-h100-v0.11"), 0.01),
    NonTorchDefault((0, 11), 2, 0.54, ("qwen3-32b-2xh100-v0.11",), 0.01),
    NonTorchDefault(
        (0, 19), 1, 0.25, ("llama-3.1-8b-h100-v0.19",), 0.02, (("granite-3.", "Granite 3.x language models", 0.46),)
    ),
    NonTorchDefault((0, 19), 2, 2.07, ("llama-3.1-8b-2xh100-v0.19",), 0.04),
    NonTorchDefault((0, 19), 4, 2.13, ("llama-3.1-8b-4xh100-v0.19",), 0.08),
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


def vllm_non_torch(gpu_name: str, tp: int, version: tuple[int, ...], pp: int = 1) -> tuple[int, str]:
    """(bytes, where the figure came from) of vLLM's non-torch memory for this GPU, TP and release: a published
    measurement where one exists, else 0 with the reason."""
    if pp > 1:  # the measurements are without pipeline stages (each stage has its own communicators)
        return 0, (
            "assumed 0 (not modelled with pipeline parallelism: vLLM 0.19.0 logged 0.07 GiB per stage for "
            f"Llama-3.1-8B at PP 2 and 4; {OVERRIDE})"
        )
    release = measured_release(version)
    if release is None:
        return 0, f"assumed 0 (not measured on vLLM {'.'.join(map(str, version))}; {OVERRIDE})"
    if gpu_name not in MEASURED_GPUS:
        return 0, f"assumed 0 (not measured on {gpu_name}; {OVERRIDE})"
    d = default_for(version, tp)
    if d is None:
        return 0, f"assumed 0 (not measured at TP {tp}; {OVERRIDE})"
    on = "" if release == version[:2] else f"; vLLM {version[0]}.{version[1]} itself not measured"
    spread = f"other models within {d.spread_gib:g} GiB" + "".join(f", {name} {g:g}" for _, name, g in d.outliers)
    return int(d.gib * GiB), (
        f"{d.gib:g} GiB, logged by vLLM {release[0]}.{release[1]}.0 at TP {tp} on an H100 ({spread}; "
        f"{SOURCES[release]}{on}; pass --non-torch-gib to override)"
    )
