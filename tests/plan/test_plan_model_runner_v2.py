"""kneecap.plan.profile_peak: which model runner vLLM builds by default (config/vllm.py, per release) and Model Runner
V2's profile run (v1/worker/gpu/model_runner.py), as engine mode predicts them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kneecap.model.resolve import load_model
from kneecap.plan import profile_peak as pp

CONFIGS = Path(__file__).parent / "configs"
GiB = 2**30
VOCAB, HIDDEN = 128_256, 4096


@pytest.fixture(scope="module")
def llama3_8b():
    return load_model(str(CONFIGS / "meta-llama--Meta-Llama-3-8B.json"))


def _runner(version, arch, moe=False, hybrid=False, amd=False):
    return pp.vllm_model_runner(version, arch, moe=moe, hybrid=hybrid, amd=amd)


def test_0_22_and_0_23_keep_v1_for_quantized_checkpoints():
    # 0.22.0 / 0.23.0 _is_default_v2_model_runner_model: a listed architecture, `not model_config.is_moe and not
    # model_config.is_quantized` (the HF config has a quantization_config); 0.24.0 drops the condition
    for version in ((0, 22), (0, 23)):
        assert pp.vllm_model_runner(version, "Qwen3ForCausalLM", moe=False, quantized=True) == "v1"
    assert pp.vllm_model_runner((0, 24), "Qwen3ForCausalLM", moe=False, quantized=True) == "v2"
    assert pp.vllm_model_runner((0, 25), "Qwen2ForCausalLM", moe=False, quantized=True) == "v2"
    # a kneecap model: an FP8 checkpoint of Llama is V1 at 0.23, V2 at 0.24
    fp8 = dataclasses.replace(load_model(str(CONFIGS / "meta-llama--Meta-Llama-3-8B.json")), weight_dtype="fp8")
    assert (pp.model_runner(fp8, (0, 23)), pp.model_runner(fp8, (0, 24))) == ("v1", "v2")


@pytest.mark.parametrize(
    ("version", "arch", "moe", "hybrid", "amd", "runner"),
    [
        # before 0.22 there is no default list: V1
        ((0, 21), "Qwen3ForCausalLM", False, False, False, "v1"),
        # 0.22.0 config/vllm.py:69: Qwen3 alone
        ((0, 22), "Qwen3ForCausalLM", False, False, False, "v2"),
        ((0, 22), "LlamaForCausalLM", False, False, False, "v1"),
        # 0.23.0 :69-75: Llama, Mistral, Qwen3
        ((0, 23), "LlamaForCausalLM", False, False, False, "v2"),
        ((0, 23), "MistralForCausalLM", False, False, False, "v2"),
        ((0, 23), "Qwen2ForCausalLM", False, False, False, "v1"),
        # 0.24.0 :68-77 adds three MoE architectures, still listed ones only
        ((0, 24), "Qwen2MoeForCausalLM", True, False, False, "v2"),
        ((0, 24), "Qwen2ForCausalLM", False, False, False, "v1"),
        # 0.25.0 :557-574: every dense, non-hybrid model; unlisted MoE and hybrids stay V1
        ((0, 25), "Qwen2ForCausalLM", False, False, False, "v2"),
        ((0, 25), "Gemma3ForConditionalGeneration", False, False, False, "v2"),
        ((0, 25), "Qwen3MoeForCausalLM", True, False, False, "v1"),
        ((0, 26), "Qwen3NextForCausalLM", True, True, False, "v1"),
        ((0, 26), "GraniteMoeHybridForCausalLM", False, True, False, "v1"),
        # 0.27.0 :69-101: KimiK3 listed, but not on ROCm
        ((0, 27), "KimiK3ForConditionalGeneration", True, False, False, "v2"),
        ((0, 27), "KimiK3ForConditionalGeneration", True, False, True, "v1"),
        # 0.28.0 :69-93: DeepseekV4 listed, but not on ROCm
        ((0, 28), "DeepseekV4ForCausalLM", True, False, False, "v2"),
        ((0, 28), "DeepseekV4ForCausalLM", True, False, True, "v1"),
        ((0, 28), "MixtralForCausalLM", True, False, False, "v1"),
        # 0.29.0 :645-676: every model, ROCm keeps V1 for ROCM_DEFAULT_MRV1_ARCHITECTURES
        ((0, 29), "MixtralForCausalLM", True, False, False, "v2"),
        ((0, 29), "Qwen3NextForCausalLM", True, True, True, "v2"),
        ((0, 29), "DeepseekV32ForCausalLM", True, False, True, "v1"),
        ((0, 29), "GlmMoeDsaForCausalLM", True, False, True, "v2"),
        # 0.30.0 :73-75 adds GlmMoeDsa to the ROCm list
        ((0, 30), "GlmMoeDsaForCausalLM", True, False, True, "v1"),
        ((0, 31), "DeepseekV4ForCausalLM", True, False, True, "v1"),
        # 0.32.0 :703-739: every model on every platform
        ((0, 32), "DeepseekV32ForCausalLM", True, False, True, "v2"),
        ((0, 33), "LlamaForCausalLM", False, False, True, "v2"),
        # 0.34.0 removes V1
        ((0, 34), "LlamaForCausalLM", False, False, False, "v2"),
    ],
)
def test_the_runner_vllm_builds_by_default(version, arch, moe, hybrid, amd, runner):
    assert _runner(version, arch, moe, hybrid, amd) == runner


def test_the_v2_sampler_samples_greedily_from_the_16_bit_logits(llama3_8b):
    # profile_run holds the forward's output and its last-token rows (no rand_like); _dummy_sampler_run computes the
    # 16-bit logits and samples greedily: gumbel_sample's int64 argmax and fp32 max per 1,024-wide block
    padded = VOCAB  # 128,256 is a multiple of 64
    gumbel = 1024 * -(-VOCAB // 1024) * 12
    held = (8192 + 1024) * HIDDEN * 2
    assert pp.v2_sampler_bytes(llama3_8b, 8192, 1024, (0, 26)) == held + 1024 * padded * 2 + gumbel
    # 0.22.0-0.25.0 apply_sampling_params still copies the logits to fp32 whatever the requests
    f = 1024 * VOCAB * 4
    for version in ((0, 22), (0, 25)):
        assert pp.v2_sampler_bytes(llama3_8b, 8192, 1024, version) == held + 1024 * padded * 2 + f + gumbel
    assert pp.v2_sampler_bytes(llama3_8b, 8192, 1024, (0, 32)) == pp.v2_sampler_bytes(llama3_8b, 8192, 1024, (0, 26))


def test_gemma_2s_soft_cap_holds_two_16_bit_logits_above_the_greedy_pass():
    # layers/logits_processor.py forward: logits / soft_cap, tanh, * soft_cap, each a new 16-bit tensor beside the
    # previous one: two at a time, above the greedy pass's one (0.26-0.32), under 0.22-0.25's fp32 copy and 0.33's 3F
    m = load_model(str(CONFIGS / "google--gemma-2-9b-it.json"))
    rows, vocab, hidden = 1024, 256_000, m.hidden_size
    held = (8192 + rows) * hidden * 2
    assert pp.v2_sampler_bytes(m, 8192, rows, (0, 32)) == held + 2 * rows * vocab * 2
    greedy = held + rows * vocab * 2 + rows * 250 * 12
    assert pp.v2_sampler_bytes(dataclasses.replace(m, architecture="GemmaForCausalLM"), 8192, rows, (0, 32)) == greedy
    assert pp.v2_sampler_bytes(m, 8192, rows, (0, 25)) == held + rows * vocab * (2 + 4) + rows * 250 * 12
    assert pp.v2_sampler_bytes(m, 8192, rows, (0, 33)) == held + rows * vocab * (2 + 12) + 2**20


def _peak(model, version, **kw):
    args = dict(
        tp=1,
        gpu_name="h100-sxm",
        version=version,
        max_model_len=16000,
        max_num_batched_tokens=8192,
        max_num_seqs=1024,
        sm_count=132,
    )
    return pp.vllm_profile_peak(model, **{**args, **kw})


def test_llama_from_0_23_is_profiled_by_model_runner_v2(llama3_8b):
    v1 = _peak(llama3_8b, (0, 22, 0))
    assert (v1.runner, v1.phase) == ("v1", "sampler")
    for version in ((0, 23, 0), (0, 26, 0), (0, 32, 0)):
        p = _peak(llama3_8b, version)
        assert p.release == f"{version[0]}.{version[1]} (Model Runner V2)" and p.runner == "v2"
        # the same compiled forward as V1's rule; the greedy sampler sits below it from 0.26
        assert p.forward_bytes == pp.v1_forward_bytes(llama3_8b, 1, 8192) == v1.forward_bytes
        assert p.sampler_bytes == pp.v2_sampler_bytes(llama3_8b, 8192, 1024, version)
        assert p.peak_bytes == p.workspace_bytes + max(p.forward_bytes, p.sampler_bytes)
        assert p.kept_bytes == p.workspace_bytes and p.sm_count is None
    assert _peak(llama3_8b, (0, 32, 0)).phase == "forward"
    # VLLM_USE_V2_MODEL_RUNNER=0: the V1 rule at the same release
    assert _peak(llama3_8b, (0, 32, 0), runner="v1").release == "0.32 (V1)"
    # V2 needs no SM count (no Triton top-k/top-p buffer)
    assert _peak(llama3_8b, (0, 32, 0), sm_count=None) == _peak(llama3_8b, (0, 32, 0))


def test_0_33_adds_a_warm_up_pass_with_fp32_logits_and_flashinfers_top_k_top_p(llama3_8b):
    # 0.33.0 _dummy_sampler_run samples the same logits again with SamplingParams.for_sampler_warmup(): the fp32 copy,
    # then FlashInfer 0.7.2.post1's top_k_mask_logits (an fp32 copy and a cached 1 MiB buffer) and softmax: 3F
    f = 1024 * VOCAB * 4
    held = (8192 + 1024) * HIDDEN * 2 + 1024 * VOCAB * 2
    assert pp.v2_sampler_bytes(llama3_8b, 8192, 1024, (0, 33)) == held + 3 * f + 2**20
    p = _peak(llama3_8b, (0, 33, 0))
    assert (p.runner, p.phase) == ("v2", "sampler")
    assert p.kept_bytes == p.workspace_bytes + 2**20
    assert "then with the warm-up parameters: fp32 logits and FlashInfer's top-k/top-p" in p.environment
    # V1's 0.33 rule holds the gathered rows' rand_like and the Triton buffer besides: V2's peak is below it
    assert p.sampler_bytes < _peak(llama3_8b, (0, 33, 0), runner="v1").sampler_bytes


def test_v2s_penalty_tables_come_off_the_pool_from_0_27(llama3_8b):
    # sample/penalties.py: prompt_bin_mask [seqs, vocab / 32] and output_bin_counts [seqs, vocab], int32, allocated
    # with the sampler before the run; 0.27+ count them in total_consumed, 0.26 in no term
    tables = 1024 * (-(-VOCAB // 32) + VOCAB) * 4
    assert pp.v2_runner_buffer_bytes(llama3_8b, 1024) == tables
    p26, p27 = _peak(llama3_8b, (0, 26, 0)), _peak(llama3_8b, (0, 27, 0))
    assert p26.runner_buffer_bytes == 0 and p26.charged_bytes == p26.peak_bytes
    assert p27.runner_buffer_bytes == tables and p27.charged_bytes == p27.peak_bytes + tables
    assert p27.logs_transient and not p26.logs_transient
    assert "plus 0.505 GiB of penalty tables Model Runner V2 allocates before the run" in p27.describe()
    # they scale with max_num_seqs
    assert _peak(llama3_8b, (0, 32, 0), max_num_seqs=256).runner_buffer_bytes == tables // 4


def test_where_v2_is_not_modelled_the_plan_says_why(llama3_8b):
    # 0.34 pins a FlashInfer release that cannot be read (flashinfer-python 0.7.3 is not on PyPI)
    assert _peak(llama3_8b, (0, 34, 0)) is None
    why = pp.unmodelled_reason(llama3_8b, (0, 34))
    assert why.startswith("vLLM 0.34 profiles LlamaForCausalLM with Model Runner V2 (its only runner), whose dummy")
    assert "FlashInfer release it pins (0.7.3 for 0.34)" in why
    # ROCm under V2 was not read
    assert _peak(llama3_8b, (0, 32, 0), amd=True, gpu_name="mi300x") is None
    assert "read for CUDA GPUs only" in pp.unmodelled_reason(llama3_8b, (0, 32), amd=True)
    # V2 forced before 0.22: not read
    assert "from vLLM 0.22 on" in pp.unmodelled_reason(llama3_8b, (0, 20), runner="v2")


def test_gemma_3_under_v2_profiles_the_encoder_from_0_27_holding_its_outputs_only():
    m = load_model("gemma-3-27b")
    p26 = _peak(m, (0, 26, 0))  # 0.22.0-0.26.0 profile_run profiles no encoder
    assert (p26.runner, p26.images, p26.encoder_held_bytes) == ("v2", 0, 0)
    p32 = _peak(m, (0, 32, 0))
    images, encoder, held_v1 = pp.v1_encoder_profile(m, 1, 8192)
    pixels = images * 3 * 896**2 * 2
    assert (p32.images, p32.encoder_bytes, p32.encoder_held_bytes) == (images, encoder, held_v1 - pixels)
    assert p32.sampler_bytes == p32.encoder_held_bytes + pp.v2_sampler_bytes(m, 8192, 1024, (0, 32))
    assert "(their outputs, " in p32.describe()


def _engine(cli, *args):
    r = cli("plan", *args, "--engine", "vllm", "--json")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)["engine"]


def test_engine_mode_follows_the_runner_and_its_graph_estimate(cli):
    base = ["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "16000"]
    v1 = _engine(cli, *base, "--engine-version", "0.22")
    v2 = _engine(cli, *base, "--engine-version", "0.23")
    assert v1["activation_profile"]["runner"] == "v1" and v2["activation_profile"]["runner"] == "v2"
    # Model Runner V2's profile_cudagraph_memory returns 0 through 0.28: nothing subtracted, --cudagraph-gib ignored
    assert v1["cudagraph_bytes"] > 0 and v2["cudagraph_bytes"] == 0
    assert v2["cudagraph_source"].startswith("none: vLLM 0.23 builds Model Runner V2 for LlamaForCausalLM")
    given = _engine(cli, *base, "--engine-version", "0.28", "--cudagraph-gib", "1")
    assert given["cudagraph_bytes"] == 0 and "(--cudagraph-gib ignored)" in given["cudagraph_source"]
    assert _engine(cli, *base, "--engine-version", "0.29")["cudagraph_bytes"] > 0  # V2 measures from 0.29
    # the default release: the peak and the penalty tables come off the pool
    d = _engine(cli, *base)
    prof = d["activation_profile"]
    assert d["version"] == "0.32" and prof["runner"] == "v2"
    assert d["activation_bytes"] == prof["peak_bytes"] + prof["runner_buffer_bytes"]
    assert "Model Runner V2, its default runner for every model" in d["activation_source"]


def test_the_docs_figures_for_llama_3_1_8b_under_v2_are_what_engine_mode_prints(cli):
    # docs/engine-model.md, "Which model runner vLLM builds ...": the command it names, per GPU and release
    doc = " ".join((Path(__file__).parents[2] / "docs" / "engine-model.md").read_text().split())
    base = ["--preset", "llama-3.1-8b", "--context", "16000"]
    h100, a100 = _engine(cli, *base, "--gpu", "h100-sxm"), _engine(cli, *base, "--gpu", "a100-80")
    h33 = _engine(cli, *base, "--gpu", "h100-sxm", "--engine-version", "0.33")
    p, q, r = h100["activation_profile"], a100["activation_profile"], h33["activation_profile"]

    def gib(x):
        return f"{x / GiB:.3f}"

    assert (
        f"the forward sets the peak, {gib(p['peak_bytes'])} GiB ({gib(p['peak_bytes'] - p['kept_bytes'])} GiB of it "
        f"logged as peak activation, plus the CUDA-graph estimate), with {gib(p['runner_buffer_bytes'])} GiB of "
        f"penalty tables: {gib(h100['activation_bytes'])} GiB off the pool"
    ) in doc
    assert f"(2,048 tokens, 256 sequences) {gib(q['peak_bytes'])} GiB and {gib(q['runner_buffer_bytes'])} GiB" in doc
    assert f"sets the H100's peak, {gib(r['peak_bytes'])} GiB, {gib(h33['activation_bytes'])} GiB off the pool" in doc
