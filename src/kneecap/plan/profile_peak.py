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
LAYER_KINDS_MODELLED = {"full_attention", "sliding_attention"}
# [hidden]-wide tensors live at the MLP's peak besides gate_up and its activation, by vLLM 0.6 / 0.7 model class
V0_MLP_HIDDEN_LIVE = {"LlamaForCausalLM": 3, "MistralForCausalLM": 3, "Qwen2ForCausalLM": 4}


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

    @property
    def phase(self) -> str:
        return "sampler" if self.sampler_bytes > self.forward_bytes else "forward"

    def describe(self) -> str:
        return (
            f"vLLM {self.release} profile run of {self.tokens:,} tokens in {self.rows} sequences: forward "
            f"{self.forward_bytes / GiB:.3f} GiB, sampler {self.sampler_bytes / GiB:.3f} GiB, cuBLAS workspace "
            f"{self.workspace_bytes / 2**20:.1f} MiB; peak {self.peak_bytes / GiB:.3f} GiB (the {self.phase})"
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


def unmodelled_reason(model) -> str:
    """Why kneecap has no profile-run rule for this model ('' if it has one)."""
    if model.num_experts:
        return "MoE layers (the fused-MoE kernels' buffers) are not modelled"
    kinds = set(model.layer_types) - LAYER_KINDS_MODELLED
    if kinds:
        return f"{', '.join(sorted(kinds))} layers are not modelled"
    if model.vision_tower is not None or model.encoder_params:
        return "the multimodal encoder's profile is not modelled"
    if not model.intermediate_size:
        return "the config does not state intermediate_size"
    if model.architecture not in V0_MLP_HIDDEN_LIVE:
        return f"{model.architecture}'s layer was not read (rules: {', '.join(V0_MLP_HIDDEN_LIVE)})"
    return ""


def vllm_profile_peak(
    model, *, tp: int, gpu_name: str, version: tuple[int, ...], max_model_len: int, max_num_batched_tokens: int | None
) -> ProfilePeak | None:
    """The activation peak of `version`'s profile run for a dense Llama-style model, or None where kneecap has no
    rule (the release's profile run was not read, or the model is of a kind the rule does not cover)."""
    if version[:2] not in V0_FAMILY or unmodelled_reason(model):
        return None
    tokens = max_num_batched_tokens or v0_batch(max_model_len, model.sliding_window, version)
    rows = min(V0_MAX_NUM_SEQS, tokens)
    forward = v0_forward_bytes(model, tp, tokens)
    sampler = v0_sampler_bytes(model, tokens, rows)
    workspace = cublas_workspace_bytes(gpu_name)
    family = f"{version[0]}.{version[1]} (V0)"
    return ProfilePeak(family, tokens, rows, forward, sampler, workspace, workspace + max(forward, sampler))
