"""GGUF: tiny files written here with gguf.GGUFWriter, read back through load_model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from kneecap.model import load_model, param_breakdown, total_weight_bytes  # noqa: E402
from kneecap.model.kv import kv_bytes_per_token  # noqa: E402

Q8_0 = gguf.GGMLQuantizationType.Q8_0


def _write(path: Path, arch: str, meta: dict, tensors: dict) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("tiny-test")
    for key, value in meta.items():
        getattr(writer, f"add_{key}")(value)
    for name, (shape, qtype) in tensors.items():
        data = np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape)
        if qtype == Q8_0:
            writer.add_tensor(name, gguf.quants.quantize(data, Q8_0), raw_dtype=Q8_0)
        else:
            writer.add_tensor(name, data.astype(qtype))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _dense_tensors(layers: int, hidden: int, kv_dim: int, ffn: int, vocab: int) -> dict:
    t = {
        "token_embd.weight": ((vocab, hidden), np.float16),
        "output_norm.weight": ((hidden,), np.float32),
        "output.weight": ((vocab, hidden), Q8_0),
    }
    for i in range(layers):
        t |= {
            f"blk.{i}.attn_norm.weight": ((hidden,), np.float32),
            f"blk.{i}.ffn_norm.weight": ((hidden,), np.float32),
            f"blk.{i}.attn_q.weight": ((hidden, hidden), Q8_0),
            f"blk.{i}.attn_k.weight": ((kv_dim, hidden), Q8_0),
            f"blk.{i}.attn_v.weight": ((kv_dim, hidden), Q8_0),
            f"blk.{i}.attn_output.weight": ((hidden, hidden), Q8_0),
            f"blk.{i}.ffn_gate.weight": ((ffn, hidden), np.float16),
            f"blk.{i}.ffn_up.weight": ((ffn, hidden), np.float16),
            f"blk.{i}.ffn_down.weight": ((hidden, ffn), np.float16),
        }
    return t


def test_dense_llama_gguf_exact_params_and_bytes(tmp_path):
    meta = {
        "block_count": 2,
        "embedding_length": 64,
        "head_count": 4,
        "head_count_kv": 2,
        "context_length": 2048,
        "feed_forward_length": 128,
    }
    path = _write(tmp_path / "tiny.gguf", "llama", meta, _dense_tensors(2, 64, 32, 128, 100))
    model = load_model(str(path))
    assert (model.architecture, model.name, model.vocab_size) == ("llama", "tiny-test", 100)
    assert (model.num_hidden_layers, model.num_key_value_heads, model.head_dim) == (2, 2, 16)  # 64 / 4
    # embed 100*64 = 6,400; per layer attn 64*64*2 + 32*64*2 = 12,288, MLP 3*128*64 = 24,576, norms 128
    # -> 36,992 x2 = 73,984; output_norm 64; output 6,400 -> 86,848
    assert model.total_params == 86_848
    assert param_breakdown(model) == {
        "embed": 6_400,
        "attention": 24_576,
        "dense_mlp": 49_152,
        "lm_head": 6_400,
        "norms": 320,
    }
    # bytes: embed f16 12,800; norms f32 320*4 = 1,280; Q8_0 = 34 B per 32 weights: attention 24,576/32*34 =
    # 26,112; MLP f16 49,152*2 = 98,304; output 6,400/32*34 = 6,800 -> 145,296
    assert model.checkpoint_bytes == 145_296 == total_weight_bytes(model)
    assert kv_bytes_per_token(model, 2) == 256  # 2 layers x 2 (K,V) x 2 heads x 16 x 2 B
    assert model.max_position_embeddings == 2048


def test_moe_gguf_active_params(tmp_path):
    hidden, ffn, experts = 64, 32, 4
    tensors = {"token_embd.weight": ((50, hidden), np.float32), "output_norm.weight": ((hidden,), np.float32)}
    for i in range(2):
        tensors |= {
            f"blk.{i}.attn_q.weight": ((hidden, hidden), np.float32),
            f"blk.{i}.attn_k.weight": ((hidden, hidden), np.float32),
            f"blk.{i}.attn_v.weight": ((hidden, hidden), np.float32),
            f"blk.{i}.attn_output.weight": ((hidden, hidden), np.float32),
            f"blk.{i}.ffn_gate_inp.weight": ((experts, hidden), np.float32),
            f"blk.{i}.ffn_gate_exps.weight": ((experts, ffn, hidden), np.float32),
            f"blk.{i}.ffn_up_exps.weight": ((experts, ffn, hidden), np.float32),
            f"blk.{i}.ffn_down_exps.weight": ((experts, hidden, ffn), np.float32),
        }
    meta = {
        "block_count": 2,
        "embedding_length": hidden,
        "head_count": 4,
        "head_count_kv": 4,
        "expert_count": experts,
        "expert_used_count": 1,
    }
    model = load_model(str(_write(tmp_path / "moe.gguf", "qwen3moe", meta, tensors)))
    # expert = 3*32*64 = 6,144; experts 6,144*4*2 = 49,152; attn 4*64*64*2 = 32,768; router 4*64*2 = 512;
    # embed 50*64 = 3,200 (tied: no output tensor); norms 64 -> 85,696; active = total - 2*3*6,144 = 48,832
    assert model.total_params == 85_696
    assert model.active_params == 48_832
    assert (model.num_experts, model.num_experts_per_tok, model.expert_params, model.num_moe_layers) == (4, 1, 6_144, 2)


def test_sliding_and_mla_gguf(tmp_path):
    tensors = {"token_embd.weight": ((10, 32), np.float32)}
    meta = {"block_count": 12, "embedding_length": 32, "head_count": 2, "head_count_kv": 1, "sliding_window": 512}
    model = load_model(str(_write(tmp_path / "g3.gguf", "gemma3", meta, tensors)))
    # llama.cpp gemma3: every 6th layer global -> 10 sliding (window 512) + 2 full
    assert (model.count_layers("sliding_attention"), model.count_layers("full_attention")) == (10, 2)
    assert model.sliding_window == 512
    meta = {
        "block_count": 3,
        "embedding_length": 32,
        "head_count": 2,
        "head_count_kv": 2,
        "kv_lora_rank": 16,
        "rope_dimension_count": 8,
        "key_length": 24,
    }
    mla = load_model(str(_write(tmp_path / "ds.gguf", "deepseek2", meta, tensors)))
    assert set(mla.layer_types) == {"mla"}
    assert kv_bytes_per_token(mla, 2) == 3 * (16 + 8) * 2  # 144
    assert mla.v_head_dim is None  # no value length written


def test_mla_gguf_value_head_width_from_either_converter(tmp_path):
    tensors = {"token_embd.weight": ((10, 32), np.float32)}
    base = {"block_count": 3, "embedding_length": 32, "head_count": 2, "kv_lora_rank": 16, "rope_dimension_count": 8}
    # llama.cpp before MLA-as-MQA: key/value lengths are the per-head q/k and v widths
    old = {**base, "key_length": 24, "value_length": 12}
    assert load_model(str(_write(tmp_path / "old.gguf", "deepseek2", old, tensors))).v_head_dim == 12
    # since: value_length is the latent (kv_lora_rank), the v width is value_length_mla
    new = {**base, "key_length": 24, "value_length": 16, "key_length_mla": 24, "value_length_mla": 12}
    assert load_model(str(_write(tmp_path / "new.gguf", "deepseek2", new, tensors))).v_head_dim == 12


def test_mla_gguf_head_dim_is_the_per_head_width_not_the_latent(tmp_path):
    # DeepSeek-V3's widths: kv_lora_rank 512, qk_rope 64, qk_nope 128, v 128 (config.json head_dim 128 + 64 = 192)
    tensors = {"token_embd.weight": ((10, 64), np.float32)}
    base = {"block_count": 2, "embedding_length": 64, "head_count": 4, "kv_lora_rank": 512, "rope_dimension_count": 64}
    # a current converter: key_length is the latent row (512 + 64 = 576), key_length_mla the per-head 192
    new = {**base, "key_length": 576, "value_length": 512, "key_length_mla": 192, "value_length_mla": 128}
    model = load_model(str(_write(tmp_path / "new.gguf", "deepseek2", new, tensors)))
    assert (model.head_dim, model.v_head_dim) == (192, 128)
    assert kv_bytes_per_token(model, 2) == 2 * (512 + 64) * 2  # the cache is still the latent + rope row
    # an older converter: key_length was the per-head width itself
    old = {**base, "key_length": 192, "value_length": 128}
    assert load_model(str(_write(tmp_path / "old.gguf", "deepseek2", old, tensors))).head_dim == 192


def test_gguf_missing_key_is_one_line(tmp_path):
    from kneecap.errors import KneecapError

    path = _write(
        tmp_path / "bad.gguf",
        "llama",
        {"embedding_length": 32, "head_count": 2},
        {"token_embd.weight": ((10, 32), np.float32)},
    )
    with pytest.raises(KneecapError) as info:
        load_model(str(path))
    assert "llama.block_count" in info.value.message and str(path) in info.value.message


def test_folder_with_one_gguf(tmp_path):
    meta = {"block_count": 1, "embedding_length": 32, "head_count": 2}
    _write(tmp_path / "only.gguf", "llama", meta, {"token_embd.weight": ((10, 32), np.float32)})
    assert load_model(str(tmp_path)).total_params == 320


def test_nemotron_h_style_hybrid_gguf(tmp_path):
    # blocks M * - M: head_count_kv 0 = no attention; feed_forward_length > 0 without attention = MLP-only block
    tensors = {
        "token_embd.weight": ((10, 32), np.float32),
        "blk.0.ssm_in.weight": ((200, 32), np.float32),
        "blk.1.attn_q.weight": ((32, 32), np.float32),
        "blk.2.ffn_up.weight": ((128, 32), np.float32),
        "blk.3.ssm_out.weight": ((32, 64), np.float32),
    }
    meta = {
        "block_count": 4,
        "embedding_length": 32,
        "head_count": 4,
        "head_count_kv": [0, 2, 0, 0],
        "feed_forward_length": [0, 0, 128, 0],
        "ssm_conv_kernel": 4,
        "ssm_inner_size": 64,
        "ssm_state_size": 16,
        "ssm_group_count": 2,
        "ssm_time_step_rank": 4,
    }
    model = load_model(str(_write(tmp_path / "nh.gguf", "nemotron_h", meta, tensors)))
    assert model.layer_types == ("linear_attention", "full_attention", "linear_attention")  # MLP block folded
    assert kv_bytes_per_token(model, 2) == 64  # 1 layer x 2 x 2 heads x (32 / 4 = 8) x 2 B
    # Mamba-2 state in f32: conv (64 + 2*2*16 = 128) x 3 x 4 B = 1,536; SSM 64 x 16 x 4 B = 4,096 -> 5,632
    assert model.linear_state_bytes_per_layer == 5_632
    parts = param_breakdown(model)
    # ssm_in 200*32 + ssm_out 32*64 = 8,448; attn_q 32*32 = 1,024; ffn_up 128*32 = 4,096
    assert (parts["linear_attention"], parts["attention"], parts["dense_mlp"]) == (8_448, 1_024, 4_096)


_TINY_META = {
    "block_count": 2,
    "embedding_length": 64,
    "head_count": 4,
    "head_count_kv": 2,
    "context_length": 2048,
    "feed_forward_length": 128,
}

# where a cut lands -> the words the error must use for it
_CUTS = [
    ("empty", "file is empty"),
    ("magic", "magic number"),
    ("counts", "metadata count"),
    ("key", "the key of metadata entry"),
    ("value", "the value of metadata entry 2 of"),
    ("tensor_name", "the name of tensor info 1 of"),
    ("tensor_dims", "the dimensions of tensor info"),
    ("data", "bytes missing"),
    ("last_byte", "1 bytes missing"),
]


@pytest.fixture(scope="module")
def tiny_gguf_bytes(tmp_path_factory) -> tuple[bytes, dict]:
    path = _write(tmp_path_factory.mktemp("g") / "tiny.gguf", "llama", _TINY_META, _dense_tensors(2, 64, 32, 128, 100))
    data = path.read_bytes()
    reader = gguf.GGUFReader(str(path))
    fields = list(reader.fields.values())
    kv = [f for f in fields if not f.name.startswith("GGUF.")]
    first_tensor = reader.tensors[0].field
    ends = [t.data_offset + t.n_bytes for t in reader.tensors]
    offsets = {
        "empty": 0,
        "magic": 2,
        "counts": 20,
        "key": kv[0].offset + 10,  # inside the first key's text
        "value": kv[1].offset + 8 + len(kv[1].name) + 4 + 3,  # inside the second entry's value
        "tensor_name": first_tensor.offset + 9,
        "tensor_dims": first_tensor.offset + 8 + len(reader.tensors[0].name) + 4 + 3,
        "data": reader.data_offset + 100,
        "last_byte": max(ends) - 1,
    }
    return data, offsets


@pytest.mark.parametrize(("where", "words"), _CUTS, ids=[c[0] for c in _CUTS])
def test_truncated_gguf_names_where_it_ends(tmp_path, tiny_gguf_bytes, where, words):
    from kneecap.errors import KneecapError

    data, offsets = tiny_gguf_bytes
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: offsets[where]])
    with pytest.raises(KneecapError) as info:
        load_model(str(path))
    line = info.value.one_line()
    assert "\n" not in line and "truncated or corrupt" in line and words in line, line
    assert "re-download" in info.value.hint and "gguf-dump" in info.value.hint
    for internal in ("unpack", "out of bounds", "reshape", "dtype", "mmap"):
        assert internal not in line, line
