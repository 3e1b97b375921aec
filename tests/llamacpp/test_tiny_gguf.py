"""The tiny GGUF writer: deterministic bytes, the metadata and tensor shapes llama.cpp reads, and
the construction that keeps control/byte tokens out of generated text. No server needed."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from kneecap.errors import KneecapError
from tiny_gguf import (
    BOS_ID,
    CHARACTERS,
    EOS_ID,
    FIRST_CHAR_ID,
    SPACE_PIECE,
    UNK_ID,
    TinyLlamaConfig,
    vocabulary,
    write_tiny_gguf,
)

gguf = pytest.importorskip("gguf")


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = write_tiny_gguf(tmp_path / "a.gguf", seed=7)
    b = write_tiny_gguf(tmp_path / "b.gguf", seed=7)
    c = write_tiny_gguf(tmp_path / "c.gguf", seed=8)
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)


def test_metadata_and_tensor_shapes_match_the_config(tmp_path):
    config = TinyLlamaConfig(
        num_hidden_layers=3,
        hidden_size=96,
        intermediate_size=160,
        num_attention_heads=6,
        num_key_value_heads=2,
        context_length=2048,
    )
    reader = gguf.GGUFReader(write_tiny_gguf(tmp_path / "m.gguf", config))
    fields = {name: reader.fields[name].contents() for name in reader.fields}
    assert fields["general.architecture"] == "llama"
    assert fields["llama.block_count"] == 3
    assert fields["llama.embedding_length"] == 96
    assert fields["llama.feed_forward_length"] == 160
    assert fields["llama.attention.head_count"] == 6
    assert fields["llama.attention.head_count_kv"] == 2
    assert fields["llama.context_length"] == 2048
    assert fields["llama.rope.dimension_count"] == 16
    assert fields["tokenizer.ggml.model"] == "llama"
    assert fields["tokenizer.ggml.bos_token_id"] == BOS_ID
    assert fields["tokenizer.ggml.eos_token_id"] == EOS_ID
    assert fields["tokenizer.ggml.unknown_token_id"] == UNK_ID
    tokens = fields["tokenizer.ggml.tokens"]
    assert len(tokens) == config.vocab_size == len(fields["tokenizer.ggml.token_type"])
    assert SPACE_PIECE in tokens and "a" in tokens and "<0xC3>" in tokens

    shapes = {t.name: tuple(int(d) for d in t.data.shape) for t in reader.tensors}
    n_vocab = config.vocab_size
    assert shapes["token_embd.weight"] == (n_vocab, 96)
    assert shapes["output.weight"] == (n_vocab, 96)
    assert shapes["output_norm.weight"] == (96,)
    for layer in range(3):
        assert shapes[f"blk.{layer}.attn_q.weight"] == (6 * 16, 96)
        assert shapes[f"blk.{layer}.attn_k.weight"] == (2 * 16, 96)  # GQA: fewer K/V rows
        assert shapes[f"blk.{layer}.attn_v.weight"] == (2 * 16, 96)
        assert shapes[f"blk.{layer}.attn_output.weight"] == (96, 6 * 16)
        assert shapes[f"blk.{layer}.ffn_gate.weight"] == (160, 96)
        assert shapes[f"blk.{layer}.ffn_up.weight"] == (160, 96)
        assert shapes[f"blk.{layer}.ffn_down.weight"] == (96, 160)
    assert len(shapes) == 3 + 9 * 3


def test_suppressed_tokens_lose_to_every_character_for_any_residual(tmp_path):
    """Dimension 0 of the residual is +1 and never written by a layer, so after RMSNorm it is
    positive; control and byte tokens read only that dimension, with a large negative weight."""
    config = TinyLlamaConfig(pad_vocab_to=1000)
    reader = gguf.GGUFReader(write_tiny_gguf(tmp_path / "m.gguf", config))
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    assert tensors["output.weight"].shape[0] == config.vocab_size == 1000
    chars = slice(FIRST_CHAR_ID, FIRST_CHAR_ID + len(CHARACTERS))
    assert np.all(tensors["token_embd.weight"][:, 0] == 1.0)
    for name, array in tensors.items():
        if name.endswith(("attn_output.weight", "ffn_down.weight")):
            assert np.all(array[0, :] == 0.0), name
    output = tensors["output.weight"]
    rng = np.random.default_rng(1)
    hidden = rng.standard_normal((200, output.shape[1])).astype(np.float32)
    hidden[:, 0] = 1.0
    hidden /= np.sqrt(np.mean(hidden**2, axis=1, keepdims=True))  # RMSNorm (unit weights)
    logits = hidden @ output.T
    never = np.concatenate([logits[:, :FIRST_CHAR_ID], logits[:, chars.stop :]], axis=1)  # control, byte, padding
    assert np.all(never.max(axis=1) < logits[:, chars].min(axis=1) - 100)


def test_vocabulary_is_character_level():
    pieces = [piece for piece, _ in vocabulary()]
    assert pieces[:3] == ["<unk>", "<s>", "</s>"]
    assert all(len(p) == 1 for p in pieces[FIRST_CHAR_ID:])
    assert len(set(pieces)) == len(pieces)
    padded = [piece for piece, _ in vocabulary(pad_to=500)]
    assert len(padded) == 500 and padded[: len(pieces)] == pieces and padded[-1] == f"<unused{500 - len(pieces) - 1}>"


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"hidden_size": 65}, "divisible"),
        ({"num_key_value_heads": 3}, "multiple"),
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"hidden_size": 24, "num_attention_heads": 8, "num_key_value_heads": 8}, "odd"),
        ({"rms_norm_eps": 0.0}, "rms_norm_eps"),
        ({"pad_vocab_to": -1}, "pad_vocab_to"),
    ],
)
def test_bad_config_is_a_kneecap_error(kwargs, fragment):
    with pytest.raises(KneecapError, match=fragment):
        TinyLlamaConfig(**kwargs)


def test_a_folder_is_not_a_model_path(tmp_path):
    with pytest.raises(KneecapError, match="folder"):
        write_tiny_gguf(tmp_path)


@pytest.mark.parametrize("weight_type, file_type", [("f32", 0), ("f16", 1), ("q8_0", 7)])
def test_weight_types_store_matrices_in_the_type_and_norms_in_f32(tmp_path, weight_type, file_type):
    reader = gguf.GGUFReader(write_tiny_gguf(tmp_path / "m.gguf", weight_type=weight_type))
    assert reader.fields["general.file_type"].contents() == file_type  # llama_ftype ALL_F32 / MOSTLY_F16 / MOSTLY_Q8_0
    for t in reader.tensors:
        expected = "f32" if t.name.endswith("norm.weight") else weight_type
        assert t.tensor_type.name.lower() == expected, t.name
    out = next(t for t in reader.tensors if t.name == "output.weight")
    rows = gguf.quants.dequantize(out.data, out.tensor_type).reshape(-1, TinyLlamaConfig().hidden_size)
    assert rows[0, 0] <= -1000.0 and not rows[0, 1:].any()  # control tokens still read only dimension 0


def test_q8_0_needs_rows_in_whole_blocks(tmp_path):
    with pytest.raises(KneecapError, match="Q8_0"):
        write_tiny_gguf(
            tmp_path / "m.gguf",
            TinyLlamaConfig(hidden_size=48, num_attention_heads=4, num_key_value_heads=2),
            weight_type="q8_0",
        )
    with pytest.raises(KneecapError, match="weight_type"):
        write_tiny_gguf(tmp_path / "m.gguf", weight_type="q4_k")
