"""Every llama.cpp weight type in a GGUF tensor table, the file-type names, and llama.cpp's KV cache types.

Expected bytes are written out by hand from ggml's block layouts (ggml/src/ggml-common.h block_* structs: e.g.
block_q8_0 = fp16 scale + 32 int8 = 34 B per 32 weights; block_q4_K = 2 fp16 + 12 B scales + 128 B nibbles =
144 B per 256), so they check that kneecap's use of the gguf package's GGML_QUANT_SIZES is right.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from kneecap.errors import KneecapError  # noqa: E402
from kneecap.model import load_model, total_weight_bytes  # noqa: E402
from kneecap.model.kv import check_kv_dtype, kv_bytes_per_token, kv_dtype_bytes  # noqa: E402
from kneecap.model.weights import weight_bits  # noqa: E402

Q = gguf.GGMLQuantizationType
# bytes per 256 weights, by hand from the block structs (blocks of 32 x 8, or one 256-weight super-block)
BYTES_PER_256 = {
    Q.F32: 1024,
    Q.F16: 512,
    Q.BF16: 512,
    Q.Q8_0: 8 * 34,
    Q.Q4_0: 8 * 18,
    Q.Q4_1: 8 * 20,
    Q.Q5_0: 8 * 22,
    Q.Q5_1: 8 * 24,
    Q.Q2_K: 84,
    Q.Q3_K: 110,
    Q.Q4_K: 144,
    Q.Q5_K: 176,
    Q.Q6_K: 210,
    Q.IQ1_S: 50,
    Q.IQ1_M: 56,
    Q.IQ2_XXS: 66,
    Q.IQ2_XS: 74,
    Q.IQ2_S: 82,
    Q.IQ3_XXS: 98,
    Q.IQ3_S: 110,
    Q.IQ4_NL: 8 * 18,
    Q.IQ4_XS: 136,
    Q.TQ1_0: 54,
    Q.TQ2_0: 66,
    Q.MXFP4: 8 * 17,
}


def _write(path: Path, tensors: dict, file_type: int | None = None) -> Path:
    """A one-layer llama GGUF whose matrices have the given types (data bytes are zeros: only the table matters)."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("types")
    for key, value in dict(
        block_count=1, embedding_length=256, head_count=2, head_count_kv=1, context_length=4096, feed_forward_length=512
    ).items():
        getattr(writer, f"add_{key}")(value)
    if file_type is not None:
        writer.add_file_type(file_type)
    for name, (shape, qtype) in tensors.items():
        if qtype == Q.F32:
            writer.add_tensor(name, np.zeros(shape, np.float32))
        else:
            writer.add_tensor(name, np.zeros(gguf.quant_shape_to_byte_shape(shape, qtype), np.uint8), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _tensors(matrix_type, output_type=None) -> dict:
    return {
        "token_embd.weight": ((100, 256), matrix_type),
        "output_norm.weight": ((256,), Q.F32),
        "blk.0.attn_norm.weight": ((256,), Q.F32),
        "blk.0.attn_q.weight": ((256, 256), matrix_type),
        "blk.0.attn_k.weight": ((128, 256), matrix_type),
        "blk.0.ffn_down.weight": ((256, 512), matrix_type),
        "output.weight": ((100, 256), output_type or matrix_type),
    }


@pytest.mark.parametrize("qtype", list(BYTES_PER_256), ids=lambda q: q.name)
def test_every_weight_type_gives_exact_tensor_bytes(tmp_path, qtype):
    model = load_model(str(_write(tmp_path / "m.gguf", _tensors(qtype))))
    # f32 norms 2*256*4 = 2,048; matrices embed 100*256 + 256*256 + 128*256 + 256*512 + output 100*256 =
    # 256 x (100 + 256 + 128 + 512 + 100) = 256 x 1,096 weights
    assert total_weight_bytes(model) == model.checkpoint_bytes == 2_048 + 1_096 * BYTES_PER_256[qtype]
    name = qtype.name.lower()
    assert model.weight_dtype == name  # no general.file_type: the tensor type holding most bytes
    assert weight_bits(name) == BYTES_PER_256[qtype] * 8 / 256


@pytest.mark.parametrize(
    "file_type, name, bits",
    [
        (gguf.LlamaFileType.MOSTLY_Q4_K_M, "q4_k_m", 4.5),  # default type q4_K: 144 B / 256
        (gguf.LlamaFileType.MOSTLY_Q3_K_S, "q3_k_s", 3.4375),  # q3_K: 110 B / 256
        (gguf.LlamaFileType.MOSTLY_Q5_K_M, "q5_k_m", 5.5),  # q5_K: 176 B / 256
        (gguf.LlamaFileType.MOSTLY_IQ3_XS, "iq3_xs", 3.4375),  # llama-quant.cpp: IQ3_XS files quantize to iq3_s
        (gguf.LlamaFileType.MOSTLY_IQ2_M, "iq2_m", 2.5625),  # ... IQ2_M to iq2_s (82 B / 256)
        (gguf.LlamaFileType.MOSTLY_MXFP4_MOE, "mxfp4_moe", 4.25),
        (gguf.LlamaFileType.MOSTLY_F16, "f16", 16.0),
        (gguf.LlamaFileType.ALL_F32, "f32", 32.0),
    ],
)
def test_file_type_names_the_mix_and_bytes_stay_exact(tmp_path, file_type, name, bits):
    # a Q4_K_M-like mix: q4_K matrices, q6_K output; the bytes come from the table whatever the file type says
    model = load_model(str(_write(tmp_path / "m.gguf", _tensors(Q.Q4_K, Q.Q6_K), file_type=int(file_type))))
    assert model.weight_dtype == name
    assert weight_bits(name) == bits
    assert model.checkpoint_bytes == 2_048 + 996 * 144 + 100 * 210  # q4_K 144 B / 256, q6_K 210 B / 256


def test_plan_reads_an_f16_gguf(tmp_path, cli):
    path = _write(tmp_path / "tiny.gguf", _tensors(Q.F16), file_type=int(gguf.LlamaFileType.MOSTLY_F16))
    result = cli("plan", "--model", str(path), "--gpu", "h100-sxm", "--json")
    assert result.code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["weight_dtype"] == "f16"
    assert plan["ledger"]["weights_bytes"] == 2_048 + 1_096 * 512
    assert plan["kv_bytes_per_token"] == 2 * 1 * 1 * 128 * 2  # 2 (K,V) x 1 layer x 1 KV head x 128 x 2 B = 512


# llama.cpp cache types: bytes per element = block bytes / 32 (block_q8_0 34, q4_0 18, q4_1 20, iq4_nl 18,
# q5_0 22, q5_1 24), whole-byte types as they are
@pytest.mark.parametrize(
    "name, per_element",
    [
        ("f16", 2),
        ("bf16", 2),
        ("f32", 4),
        ("q8_0", 34 / 32),
        ("q4_0", 18 / 32),
        ("q4_1", 20 / 32),
        ("iq4_nl", 18 / 32),
        ("q5_0", 22 / 32),
        ("q5_1", 24 / 32),
    ],
)
def test_llamacpp_cache_types(name, per_element):
    assert kv_dtype_bytes(name) == per_element


@pytest.mark.parametrize(
    "kv, per_token",
    [
        ("q8_0", 69_632),  # 2 (K,V) x 32 layers x (8 heads x 128 = 1,024 elements / 32 x 34 B = 1,088 B)
        ("q4_0", 36_864),  # 2 x 32 x (1,024 / 32 x 18 B = 576 B)
        ("q5_1", 49_152),  # 2 x 32 x (1,024 / 32 x 24 B = 768 B)
        ("f16", 131_072),  # 2 x 32 x 1,024 x 2 B
    ],
)
def test_plan_prices_llamacpp_kv_types_for_llama_3_1_8b(cli, kv, per_token):
    result = cli("plan", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--kv-dtype", kv, "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["kv_bytes_per_token"] == per_token


def test_quantized_kv_needs_head_dim_in_whole_blocks(tmp_path):
    tensors = {"token_embd.weight": ((10, 64), Q.F32)}
    writer_path = tmp_path / "hd16.gguf"
    writer = gguf.GGUFWriter(str(writer_path), "llama")
    for key, value in dict(block_count=1, embedding_length=64, head_count=4, head_count_kv=2).items():
        getattr(writer, f"add_{key}")(value)
    for name, (shape, _) in tensors.items():
        writer.add_tensor(name, np.zeros(shape, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model = load_model(str(writer_path))  # head_dim 64 / 4 = 16: llama.cpp refuses q8_0 (blocks of 32)
    with pytest.raises(KneecapError, match="blocks of 32 elements, which do not divide the head_dim 16"):
        check_kv_dtype(model, "q8_0")
    check_kv_dtype(model, "f16")
    assert kv_bytes_per_token(model, kv_dtype_bytes("f16")) == 2 * 2 * 16 * 2
    with pytest.raises(KneecapError, match="unknown KV dtype"):
        kv_dtype_bytes("q4_k")


def test_plan_refuses_a_block_kv_type_that_does_not_tile_head_dim(tmp_path):
    """`kneecap plan --kv-dtype q8_0` on a head_dim-16 model is one line naming the sizes, as llama.cpp refuses
    to start with it ("K cache type q8_0 with block size 32 does not divide n_embd_head_k=16")."""
    from clitools import run_cli

    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 256,
        "max_position_embeddings": 2048,
        "torch_dtype": "float16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    bad = run_cli("plan", "--model", str(path), "--gpu", "h100-sxm", "--kv-dtype", "q8_0", "--json")
    lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
    assert bad.code == 2 and len(lines) == 1 and "head_dim 16" in lines[0], bad.stderr
    good = run_cli("plan", "--model", str(path), "--gpu", "h100-sxm", "--kv-dtype", "f16", "--json")
    assert good.code == 0 and json.loads(good.stdout)["kv_bytes_per_token"] == 2 * 2 * 2 * 16 * 2, good.stderr
