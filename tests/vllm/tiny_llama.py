"""A tiny random-weight Hugging Face Llama written from scratch, for running a real vLLM on a CPU.

Owns: config.json, model.safetensors (written by hand: an 8-byte header length, a JSON header,
raw little-endian tensors, as the safetensors format README specifies), tokenizer.json (a
byte-level vocabulary of 256 bytes + 4 special tokens = 260 ids, made with `tokenizers`; with
think=True also <think> and </think>, 262 ids, the tokens vLLM's deepseek_r1 reasoning parser looks
up) and tokenizer_config.json with a chat template. Does not start any server (conftest.py does).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

VOCAB_SIZE = 260  # 256 byte tokens + <s>, </s>, <unk>, <pad>
SPECIALS = ("<s>", "</s>", "<unk>", "<pad>")
THINK = ("<think>", "</think>")  # vllm/reasoning/deepseek_r1_reasoning_parser.py (0.32.0): start and end token
BOS_ID, EOS_ID = 256, 257
HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE = (
    128,
    2,
    2,
    1,
    256,
)  # head_dim 64: vLLM's CPU attention takes 32, 64, 80, ...
HEAD_DIM = HIDDEN // HEADS
MAX_POSITIONS = 2048
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def config(vocab_size: int = VOCAB_SIZE) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": 256 + SPECIALS.index("<pad>"),
    }


def tensors(seed: int = 0, vocab_size: int = VOCAB_SIZE) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype("<f4")

    ones = lambda n: np.ones(n, "<f4")  # noqa: E731
    out = {
        "model.embed_tokens.weight": w(vocab_size, HIDDEN),
        "model.norm.weight": ones(HIDDEN),
        "lm_head.weight": w(vocab_size, HIDDEN),
    }
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out.update(
            {
                p + "input_layernorm.weight": ones(HIDDEN),
                p + "post_attention_layernorm.weight": ones(HIDDEN),
                p + "self_attn.q_proj.weight": w(HEADS * HEAD_DIM, HIDDEN),
                p + "self_attn.k_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
                p + "self_attn.v_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
                p + "self_attn.o_proj.weight": w(HIDDEN, HEADS * HEAD_DIM),
                p + "mlp.gate_proj.weight": w(INTERMEDIATE, HIDDEN),
                p + "mlp.up_proj.weight": w(INTERMEDIATE, HIDDEN),
                p + "mlp.down_proj.weight": w(HIDDEN, INTERMEDIATE),
            }
        )
    return out


def write_safetensors(path: Path, named: dict[str, np.ndarray]) -> None:
    """The safetensors layout: u64 LE header size, JSON header {name: dtype, shape, data_offsets}, data.

    Tensors are stored as BF16 (the top 16 bits of each float32, i.e. truncation), the config's dtype."""
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    offset, blobs = 0, []
    for name, arr in named.items():
        data = (np.ascontiguousarray(arr, "<f4").view("<u4") >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the header may be padded with spaces to align the data
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for data in blobs:
            f.write(data)


def write_tokenizer(folder: Path, think: bool = False) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet(), key=lambda ch: ch.encode("utf-8"))
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for i, tok in enumerate(SPECIALS + (THINK if think else ())):
        vocab[tok] = 256 + i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIALS))
    if think:  # added but not special, as in DeepSeek-R1's tokenizer: the text keeps them, the parser splits on them
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS_ID)]
    )
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": "<pad>",
                "add_bos_token": True,
                "model_max_length": MAX_POSITIONS,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=1,
        )
    )
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"})
    )


def write_model(folder: Path, seed: int = 0, think: bool = False) -> Path:
    """The model folder; think=True: the vocabulary also has <think> and </think> (ids 260, 261)."""
    vocab_size = VOCAB_SIZE + (len(THINK) if think else 0)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config(vocab_size), indent=1))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": BOS_ID, "eos_token_id": EOS_ID}))
    write_safetensors(folder / "model.safetensors", tensors(seed, vocab_size))
    write_tokenizer(folder, think)
    return folder


if __name__ == "__main__":
    import sys

    print(write_model(Path(sys.argv[1])))
