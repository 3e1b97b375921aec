"""The torch activation peak of vLLM's start-up profile run, derived from the release's source (pure).

Owns what vLLM subtracts as "PyTorch activation peak memory" before it sizes the KV pool, predicted from the model's
shapes and the release's profile run, with the phase that sets it. Does not own the pool formula (engines.py) nor the
non-torch memory (CUDA context, NCCL buffers, lazily loaded kernels), which kneecap does not predict.

vLLM 0.6 and 0.7 (V0 engine; read in the 0.6.4, 0.6.5, 0.7.0 and 0.7.3 sdists; all pin torch 2.5.1; the sampler,
the Llama and Qwen2 layers and the profile run below are the same in the four):
  worker/model_runner.py profile_run: max_num_seqs dummy prompts, max_num_batched_tokens tokens together, each with
    SamplingParams(top_p=0.99, top_k=vocab_size - 1) "to reflect the accurate memory usage", run eagerly (no graphs).
  worker/worker.py determine_num_available_blocks: the activation is the rise of torch's allocated_bytes peak over the
    run (0.6.5 and 0.7 utils.memory_profiling; 0.6.4 logs the peak from zero, the weights inside it).
  The run's peak is the larger of two phases, plus the cuBLAS workspace its first GEMM allocates and keeps:
  forward  (models/llama.py, which also serves MistralForCausalLM, and models/qwen2.py): the model's loop variable
           holds the layer's input while the layer runs (the fused add-RMSNorm works in place on it and on the
           residual) and the attention output is the MLP's input. LlamaMLP.forward rebinds x, so gate_up lives only
           while SiluAndMul writes its output: tokens x (3 x hidden + 3 x intermediate / tp) x 2 B. Qwen2MLP.forward
           keeps gate_up in its own name through down_proj: tokens x (4 x hidden + 3 x intermediate / tp) x 2 B.
           The attention phase (input, residual, q/k/v, attention output, o_proj output) is counted too and is
           smaller for every model read. Other architectures: no rule.
  sampler  (model_runner.execute_model holds the model's output, [tokens, hidden], and the logits, [rows, padded
           vocab] in 16 bits, the whole vocabulary on the driver after TP's gather; layers/sampler.py Sampler.forward
           casts them to fp32 (F = rows x vocab x 4 B) and _apply_top_k_top_p sorts them: values F and int64 indices 2F,
           while PyTorch's CUDA sort (aten/src/ATen/native/cuda/SortStable.cu) holds its own scratch: with >= 128 rows
           (segmented_sort_pairs) int64 reverse indices 2F and cub's alternate key and value buffers 3F
           (cub/device/dispatch/dispatch_radix_sort.cuh: without a DoubleBuffer its temporary storage holds the
           "3rd keys buffer" and "3rd values buffer", num_items each), so 16-bit logits + 9F at the sort; with
           2-127 rows (segmented_sort_pairs_by_full_sort) two int2 index buffers 4F, the sorted keys F and cub's
           buffers 3F: + 12F). The rest of the sampler (softmax, cumsum, masks,
           the scatter back, multinomial's exponential draw) holds less.
  cuBLAS workspace: torch 2.5.1 aten/src/ATen/cuda/CublasHandlePool.cpp getChosenWorkspaceSize, default
           CUBLAS_WORKSPACE_CONFIG ":4096:2:16:8" = 8,519,680 B, and 32 MiB on sm90 (H100, H200).

vLLM 0.10 to 0.14 (V1 engine; read in the 0.10.0, 0.11.0, 0.12.0, 0.13.0 and 0.14.0 sdists, torch 2.7.1 to 2.9.1):
  v1/worker/gpu_worker.py determine_available_memory runs v1/worker/gpu_model_runner.py profile_run under
    utils memory_profiling (utils/__init__.py in 0.11, utils/mem_utils.py from 0.12): torch_peak_increase is the
    rise of allocated_bytes.all.peak over the run, from a reset taken after the weights are loaded.
  profile_run: _dummy_run(max_num_tokens = max_num_batched_tokens) splits the tokens over
    min(max_num_seqs, tokens) dummy requests and returns the forward's output [tokens, hidden] with the last token
    of each request gathered ([rows, hidden], a copy); profile_run holds both while _dummy_sampler_run replaces the
    rows by torch.rand_like (a third [rows, hidden]), computes the logits ([rows, vocab padded to 64] in 16 bits,
    all-gathered on every TP rank) and runs the Sampler with temperature 0.5, top_p 0.9 and top_k vocab - 1.
  sampler (v1/sample/sampler.py, v1/sample/ops/topk_topp_sampler.py): logits.to(float32) (F = rows x vocab x 4 B),
    then apply_top_k_top_p sorts them (values F, int64 indices 2F) with the CUDA sort's scratch as in V0 (5F at
    128+ rows): 16-bit logits + 9F, the V0 sampler's peak, plus the two [rows, hidden] tensors above. This is the
    path when top-k/top-p is PyTorch's: 0.10 and 0.11 take FlashInfer's sort-free sampler whenever FlashInfer
    imports (VLLM_USE_FLASHINFER_SAMPLER unset means on in V1), and FlashInfer is not a dependency of the PyPI
    package (requirements/cuda.txt) though vLLM's Docker image builds it; 0.12 to 0.14 depend on FlashInfer but
    take its sampler only with VLLM_USE_FLASHINFER_SAMPLER=1. FlashInfer's path is not modelled.
  forward: the model runs compiled (torch.compile with Inductor, piecewise between attention ops), and Inductor
    frees each buffer after its last use, so the MLP's peak holds the residual, the MLP's input, gate_up (2 x
    intermediate / tp) and SiLU-and-mul's output (intermediate / tp): tokens x (2 x hidden + 3 x intermediate / tp)
    x 2 B. No published log has a forward-set V1 peak, so this phase is unchecked.
  Later releases: from 0.16 top-k/top-p runs a Triton kernel for 8 or more rows (v1/sample/ops/topk_topp_triton.py)
    and by 0.25 (not in 0.20) the profile run also warms the sampler's native path; neither was read: no rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from kneecap.units import GiB

ACT_BYTES = 2  # the model's 16-bit dtype: activations, logits before the sampler's cast
F32 = 4
I64 = 8
VOCAB_PADDING = 64  # vLLM 0.6.4 layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE
V0_MAX_NUM_SEQS = 256  # vLLM 0.6.4 engine/arg_utils.py EngineArgs.max_num_seqs (0.7: 256 unless VLLM_USE_V1)
V0_MIN_BATCHED_TOKENS = 2048  # vLLM 0.6.4 config.py SchedulerConfig: max(max_model_len, 2048) without chunked prefill
V0_CHUNKED_BATCHED_TOKENS = {(0, 6): 512, (0, 7): 2048}  # ... and with chunked prefill (0.7.0 config.py: 2048)
V0_LONG_CONTEXT = 32768  # engine/arg_utils.py: chunked prefill on by default above 32K (GPU, no sliding window)
SORT_FULL_SORT_BELOW = 128  # SortStable.cu: fewer segments than this sort as one full sort
# torch 2.5.1 CublasHandlePool.cpp: ":4096:2:16:8" (KiB x count) by default, ":4096:8" on sm90
CUBLAS_WORKSPACE_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8
CUBLAS_WORKSPACE_SM90_BYTES = 4096 * 8 * 1024
SM90_GPUS = ("h100", "h200", "gh200", "h20", "h800")  # catalog names of compute capability 9.0 parts
# Non-torch memory is not predicted: what vLLM counts there (0.6.4: everything on the GPU torch did not allocate,
# the CUDA context included; 0.6.5: what appeared outside torch since the worker started, NCCL buffers and kernels
# loaded on first use) has no published size kneecap could cite. Engine mode takes it as 0 unless given.
NON_TORCH_ASSUMED = "assumed 0 (not predicted; pass the engine's logged figure with --non-torch-gib)"
V0_FAMILY = ((0, 6), (0, 7))  # the releases whose profile run was read for this rule
V1_SORT_FAMILY = ((0, 10), (0, 11), (0, 12), (0, 13), (0, 14))  # V1 releases whose profile run was read (sdists)
V1_TRITON_TOPK_FROM = (0, 16)  # topk_topp_sampler.py: HAS_TRITON and rows >= 8 -> apply_top_k_top_p_triton
V1_FLASHINFER_OPT_IN_FROM = (0, 12)  # 0.12: FlashInfer's sampler only with VLLM_USE_FLASHINFER_SAMPLER=1
LAYER_KINDS_MODELLED = {"full_attention", "sliding_attention"}
# [hidden]-wide tensors live at the MLP's peak besides gate_up and its activation, by vLLM 0.6 / 0.7 model class
V0_MLP_HIDDEN_LIVE = {"LlamaForCausalLM": 3, "MistralForCausalLM": 3, "Qwen2ForCausalLM": 4}
# V1 (compiled): the residual and the MLP's input beside gate_up and its activation, whatever the eager class keeps
V1_MLP_HIDDEN_LIVE = 2
V1_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
V1_GATHERED_ROWS = 2  # [rows, hidden] tensors profile_run holds at the sampler: the gathered rows, their rand_like


@dataclass(frozen=True)
class ProfilePeak:
    """The activation peak vLLM measures in its profile run, with the two phases it is the larger of."""

    release: str  # the rule's release family, e.g. "0.6 (V0)"
    tokens: int  # the profile batch: max_num_batched_tokens
    rows: int  # sequences sampled: max_num_seqs (one row of logits each)
    forward_bytes: int  # live tensors at the forward pass's peak
    sampler_bytes: int  # live tensors at the sampler's peak (the model's output and the logits included)
    workspace_bytes: int  # the cuBLAS workspace allocated by the run's first GEMM and kept
    peak_bytes: int  # workspace + max(forward, sampler): what vLLM logs as the activation peak
    environment: str = ""  # what the rule assumes of the server's environment (V1: which top-k/top-p path)

    @property
    def phase(self) -> str:
        return "sampler" if self.sampler_bytes > self.forward_bytes else "forward"

    def describe(self) -> str:
        env = f"; assumes {self.environment}" if self.environment else ""
        return (
            f"vLLM {self.release} profile run of {self.tokens:,} tokens in {self.rows} sequences: forward "
            f"{self.forward_bytes / GiB:.3f} GiB, sampler {self.sampler_bytes / GiB:.3f} GiB, cuBLAS workspace "
            f"{self.workspace_bytes / 2**20:.1f} MiB; peak {self.peak_bytes / GiB:.3f} GiB (the {self.phase}){env}"
        )


def cublas_workspace_bytes(gpu_name: str) -> int:
    """torch 2.5.1's default cuBLAS workspace on this GPU (32 MiB on sm90, else 8,519,680 B)."""
    return CUBLAS_WORKSPACE_SM90_BYTES if gpu_name.lower().startswith(SM90_GPUS) else CUBLAS_WORKSPACE_BYTES


def v0_batch(max_model_len: int, sliding_window: int | None, version: tuple[int, ...] = (0, 6)) -> int:
    """vLLM 0.6 / 0.7's max_num_batched_tokens when not given: 512 (0.6) or 2048 (0.7) with the chunked prefill it
    turns on above 32K tokens of context (not for sliding-window models), else max(max_model_len, 2048)."""
    if max_model_len > V0_LONG_CONTEXT and not sliding_window:
        return V0_CHUNKED_BATCHED_TOKENS[version[:2]]
    return max(max_model_len, V0_MIN_BATCHED_TOKENS)


def v0_forward_bytes(model, tp: int, tokens: int) -> int:
    """Live tensors at the peak of vLLM 0.6 / 0.7's eager Llama-style forward over `tokens` tokens on one TP rank."""
    h = model.hidden_size
    q = model.num_attention_heads * model.head_dim // tp
    kv = model.num_key_value_heads * model.head_dim // tp if model.num_key_value_heads >= tp else model.head_dim
    # loop input, residual, MLP input (Qwen2: and down_proj's output beside gate_up), gate_up (2I), act (I)
    mlp = V0_MLP_HIDDEN_LIVE[model.architecture] * h + 3 * model.intermediate_size // tp
    attention = 3 * h + (q + 2 * kv) + q  # loop input, residual, o_proj output, qkv, attention output
    return tokens * max(mlp, attention) * ACT_BYTES


def v0_sampler_bytes(model, tokens: int, rows: int) -> int:
    """Live tensors at the peak of vLLM 0.6 / 0.7's sampler (the sort in _apply_top_k_top_p) on the driver rank."""
    vocab = model.vocab_size
    padded = -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
    f = rows * vocab * F32
    sort_scratch = 5 * f if rows >= SORT_FULL_SORT_BELOW else 8 * f
    held = tokens * model.hidden_size * ACT_BYTES + rows * padded * ACT_BYTES  # model output, 16-bit logits
    return held + f + 3 * f + sort_scratch  # fp32 logits, sorted values and int64 indices, the sort's scratch


def v1_forward_bytes(model, tp: int, tokens: int) -> int:
    """Live tensors at the peak of vLLM 0.10-0.14's compiled Llama-style forward over `tokens` tokens on one TP rank:
    Inductor frees each buffer after its last use, so the MLP holds the residual, its input, gate_up and its
    activation; the attention phase is counted as in V0 (unchecked: no published V1 log has a forward-set peak)."""
    h = model.hidden_size
    q = model.num_attention_heads * model.head_dim // tp
    kv = model.num_key_value_heads * model.head_dim // tp if model.num_key_value_heads >= tp else model.head_dim
    mlp = V1_MLP_HIDDEN_LIVE * h + 3 * model.intermediate_size // tp
    attention = 3 * h + (q + 2 * kv) + q
    return tokens * max(mlp, attention) * ACT_BYTES


def v1_sampler_bytes(model, tokens: int, rows: int) -> int:
    """Live tensors at the peak of vLLM 0.10-0.14's dummy sampler run with PyTorch's top-k/top-p sort: V0's sort
    (the model's output, the 16-bit logits, fp32 logits, sorted values and indices, the sort's scratch) plus the
    gathered last-token rows and their rand_like replacement, [rows, hidden] each."""
    return v0_sampler_bytes(model, tokens, rows) + V1_GATHERED_ROWS * rows * model.hidden_size * ACT_BYTES


def v1_environment(version: tuple[int, ...]) -> str:
    """What the V1 rule assumes of the server: PyTorch's top-k/top-p sort, and when the release takes it."""
    if version[:2] >= V1_FLASHINFER_OPT_IN_FROM:
        return (
            "PyTorch's top-k/top-p sort, the release's default (FlashInfer's sampler only with "
            "VLLM_USE_FLASHINFER_SAMPLER=1, not modelled)"
        )
    return (
        "PyTorch's top-k/top-p sort, taken when FlashInfer is not installed (pip install vllm does not install it "
        "in 0.10-0.11; with it vLLM samples without sorting, not modelled)"
    )


def unmodelled_reason(model, version: tuple[int, ...] = V0_FAMILY[0]) -> str:
    """Why kneecap has no profile-run rule for this model and release ('' if it has one)."""
    if model.num_experts:
        return "MoE layers (the fused-MoE kernels' buffers) are not modelled"
    kinds = set(model.layer_types) - LAYER_KINDS_MODELLED
    if kinds:
        return f"{', '.join(sorted(kinds))} layers are not modelled"
    if model.vision_tower is not None or model.encoder_params:
        return "the multimodal encoder's profile is not modelled"
    if not model.intermediate_size:
        return "the config does not state intermediate_size"
    v = version[:2]
    name = ".".join(map(str, v))
    if v in V1_SORT_FAMILY:
        if model.architecture not in V1_ARCHITECTURES:
            return f"{model.architecture}'s layer was not read (V1 rules: {', '.join(V1_ARCHITECTURES)})"
        return ""
    if v in V0_FAMILY:
        if model.architecture not in V0_MLP_HIDDEN_LIVE:
            return f"{model.architecture}'s layer was not read (rules: {', '.join(V0_MLP_HIDDEN_LIVE)})"
        return ""
    if v >= V1_TRITON_TOPK_FROM:
        return (
            f"vLLM {name}'s profile run is not modelled: from 0.16 its top-k/top-p runs a Triton kernel for 8 or "
            "more rows (v1/sample/ops/topk_topp_triton.py) whose buffers were not read (rules: 0.6-0.7, 0.10-0.14)"
        )
    return f"vLLM {name}'s profile run was not read (rules: 0.6-0.7, 0.10-0.14)"


def vllm_profile_peak(
    model,
    *,
    tp: int,
    gpu_name: str,
    version: tuple[int, ...],
    max_model_len: int,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None = None,
) -> ProfilePeak | None:
    """The activation peak of `version`'s profile run for a dense Llama-style model, or None where kneecap has no
    rule (the release's profile run was not read, or the model is of a kind the rule does not cover). V1 releases
    need the batch the server runs with (max_num_batched_tokens, max_num_seqs: the caller resolves the release's
    defaults for the GPU); V0 takes its own defaults when they are None."""
    if unmodelled_reason(model, version):
        return None
    workspace = cublas_workspace_bytes(gpu_name)
    if version[:2] in V1_SORT_FAMILY:
        if not max_num_batched_tokens:
            raise ValueError("V1's profile run needs max_num_batched_tokens (the release's default for the GPU)")
        tokens = max_num_batched_tokens
        rows = min(max_num_seqs or tokens, tokens)
        forward = v1_forward_bytes(model, tp, tokens)
        sampler = v1_sampler_bytes(model, tokens, rows)
        family = f"{version[0]}.{version[1]} (V1)"
        peak = workspace + max(forward, sampler)
        return ProfilePeak(family, tokens, rows, forward, sampler, workspace, peak, v1_environment(version))
    tokens = max_num_batched_tokens or v0_batch(max_model_len, model.sliding_window, version)
    rows = min(max_num_seqs or V0_MAX_NUM_SEQS, tokens)
    forward = v0_forward_bytes(model, tp, tokens)
    sampler = v0_sampler_bytes(model, tokens, rows)
    family = f"{version[0]}.{version[1]} (V0)"
    return ProfilePeak(family, tokens, rows, forward, sampler, workspace, workspace + max(forward, sampler))
