"""Write a tiny random-weight llama-architecture GGUF that llama.cpp's server loads and runs.

Owns the file layout only (metadata keys, vocabulary, tensor shapes); it starts no server
(see tests/llamacpp/llamacpp_server.py). Random weights give garbage text, but real timing,
real slots and a real KV cache: enough to test a load generator end to end on a CPU.

Sources for what llama.cpp reads (ggml-org/llama.cpp, and the `gguf` package's constants):
- hyper-parameters: `src/llama-model.cpp` `load_hparams` for LLM_ARCH_LLAMA reads
  `llama.context_length`, `.embedding_length`, `.block_count`, `.feed_forward_length`,
  `.attention.head_count`, `.attention.head_count_kv`, `.attention.layer_norm_rms_epsilon`,
  `.rope.dimension_count` (defaults to head_dim);
- tensors: `gguf.constants.MODEL_TENSORS[MODEL_ARCH.LLAMA]` / `TENSOR_NAMES`
  (token_embd, blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_up,
  ffn_down}, output_norm, output). GGML lists dimensions fastest-first, so a numpy array of
  shape (rows, cols) is the GGML tensor ne=[cols, rows]: attn_q is (n_head*head_dim, n_embd);
- tokenizer: `src/llama-vocab.cpp`, model "llama" = SentencePiece-style: text gets a leading
  space, spaces become U+2581 "▁", and a character missing from the vocabulary falls back to
  byte tokens "<0xXX>" (without them `byte_to_token` throws). Types: gguf.TokenType.

The vocabulary is character-level: <unk>, <s>, </s>, the 256 byte tokens, then one token per
printable ASCII character and newline, so a prompt of n such characters is n tokens (plus
BOS and the space prefix); `pad_vocab_to` appends "<unusedN>" tokens so that token-id
prompts drawn from a real model's id range are valid. Generation never emits a control, byte
or padding token: dimension 0 of
the residual stream is a constant +1 no layer writes to, and the output rows of those tokens
hold -SUPPRESS_LOGIT there (every other token's row holds 0), so their logits sit near
-SUPPRESS_LOGIT at any temperature. Every generated token is therefore one printable
character, and llama.cpp streams one chunk per token.

Weight types (`weight_type`): "f32" (every tensor F32), "f16" or "q8_0" (every matrix F16 or Q8_0, the 1-D
norm vectors F32, as llama.cpp's convert_hf_to_gguf.py --outtype f16 / q8_0 writes them; Q8_0 blocks come from
the gguf package's gguf.quants.quantize). general.file_type says which (LlamaFileType ALL_F32 / MOSTLY_F16 /
MOSTLY_Q8_0). The suppression above survives both: -SUPPRESS_LOGIT and 0 are exact in F16, and a Q8_0 block
stores 0 exactly and -SUPPRESS_LOGIT as -127 x its f16 scale (-1000.125), still far below every character.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kneecap.errors import KneecapError

UNK_ID = 0
BOS_ID = 1
EOS_ID = 2
NUM_BYTE_TOKENS = 256
FIRST_BYTE_ID = 3
FIRST_CHAR_ID = FIRST_BYTE_ID + NUM_BYTE_TOKENS
SPACE_PIECE = "\u2581"  # SentencePiece's visible space
SUPPRESS_LOGIT = 1000.0  # how far below the others control/byte tokens' logits sit

# printable ASCII (space shown as "▁") and newline: the characters a prompt is made of
CHARACTERS = ("\n",) + tuple(SPACE_PIECE if c == " " else c for c in map(chr, range(0x20, 0x7F)))


@dataclass(frozen=True)
class TinyLlamaConfig:
    """Shape of the tiny model. Sizes are counts (not bytes); `context_length` is tokens."""

    num_hidden_layers: int = 2
    hidden_size: int = 64
    intermediate_size: int = 128
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    context_length: int = 4096
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    pad_vocab_to: int = 0  # pad the vocabulary with never-generated "<unusedN>" tokens up to this size

    def __post_init__(self) -> None:
        for name in (
            "num_hidden_layers",
            "hidden_size",
            "intermediate_size",
            "num_attention_heads",
            "num_key_value_heads",
            "context_length",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise KneecapError(
                    f"tiny GGUF {name} must be a positive integer, got {value!r}", f"pass {name}=N with N >= 1"
                )
        if self.hidden_size % self.num_attention_heads:
            raise KneecapError(
                f"tiny GGUF hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}",
                "pick hidden_size as a multiple of num_attention_heads",
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise KneecapError(
                f"tiny GGUF num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}",
                "GQA needs heads = k * kv_heads",
            )
        if self.head_dim % 2:
            raise KneecapError(f"tiny GGUF head_dim {self.head_dim} is odd", "RoPE needs an even head_dim")
        if not isinstance(self.pad_vocab_to, int) or self.pad_vocab_to < 0:
            raise KneecapError(
                f"tiny GGUF pad_vocab_to must be an integer >= 0, got {self.pad_vocab_to!r}",
                "pass 0 (no padding) or a vocabulary size such as 32000",
            )
        if not self.rms_norm_eps > 0:
            raise KneecapError(f"tiny GGUF rms_norm_eps must be > 0, got {self.rms_norm_eps!r}", "use 1e-5")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def vocab_size(self) -> int:
        return len(vocabulary(self.pad_vocab_to))

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes per token at f16 (llama.cpp's default cache type): 2 (K,V) * layers * kv_heads * head_dim * 2 B."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * 2


def vocabulary(pad_to: int = 0) -> list[tuple[str, int]]:
    """(piece, gguf TokenType value) for every token id, in id order; "<unusedN>" (UNUSED) pad it to `pad_to`."""
    from gguf import TokenType

    tokens: list[tuple[str, int]] = [
        ("<unk>", TokenType.UNKNOWN),
        ("<s>", TokenType.CONTROL),
        ("</s>", TokenType.CONTROL),
    ]
    tokens += [(f"<0x{b:02X}>", TokenType.BYTE) for b in range(NUM_BYTE_TOKENS)]
    tokens += [(c, TokenType.NORMAL) for c in CHARACTERS]
    tokens += [(f"<unused{i}>", TokenType.UNUSED) for i in range(max(0, pad_to - len(tokens)))]
    return [(piece, int(kind)) for piece, kind in tokens]


WEIGHT_TYPES = ("f32", "f16", "q8_0")


def write_tiny_gguf(
    path: str | Path, config: TinyLlamaConfig = TinyLlamaConfig(), seed: int = 0, weight_type: str = "f32"
) -> Path:
    """Write the model to `path` (a new .gguf file) and return it. Same seed, config and type, same bytes."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType
    from gguf.constants import GGML_QUANT_SIZES
    from gguf.quants import quantize

    if weight_type not in WEIGHT_TYPES:
        raise KneecapError(
            f"tiny GGUF weight_type {weight_type!r} is not one the writer knows",
            f"use one of {', '.join(WEIGHT_TYPES)}",
        )
    if weight_type == "q8_0":
        block = GGML_QUANT_SIZES[GGMLQuantizationType.Q8_0][0]
        for name in ("hidden_size", "intermediate_size"):
            if getattr(config, name) % block:
                raise KneecapError(
                    f"tiny GGUF {name} {getattr(config, name)} is not a multiple of Q8_0's block of {block}",
                    f"pick {name} as a multiple of {block} for weight_type q8_0",
                )

    rng = np.random.default_rng(seed)
    out = Path(path)
    if out.is_dir():
        raise KneecapError(f"{out} is a folder", "pass a file path ending in .gguf")
    out.parent.mkdir(parents=True, exist_ok=True)

    vocab = vocabulary(config.pad_vocab_to)
    n_chars_end = FIRST_CHAR_ID + len(CHARACTERS)  # ids past this are padding, never generated
    n_vocab, n_embd, n_ff = len(vocab), config.hidden_size, config.intermediate_size
    q_rows = config.num_attention_heads * config.head_dim
    kv_rows = config.num_key_value_heads * config.head_dim

    writer = GGUFWriter(str(out), "llama")
    writer.add_name("kneecap-tiny-llama")
    writer.add_context_length(config.context_length)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_theta)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(
        {"f32": LlamaFileType.ALL_F32, "f16": LlamaFileType.MOSTLY_F16, "q8_0": LlamaFileType.MOSTLY_Q8_0}[weight_type]
    )

    writer.add_tokenizer_model("llama")
    writer.add_token_list([piece for piece, _ in vocab])
    writer.add_token_scores([0.0] * n_vocab)
    writer.add_token_types([kind for _, kind in vocab])
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_unk_token_id(UNK_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)

    def normal(*shape: int, std: float) -> "np.ndarray":
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def add_matrix(name: str, array: "np.ndarray") -> None:
        if weight_type == "f16":
            writer.add_tensor(name, array.astype(np.float16))
        elif weight_type == "q8_0":
            writer.add_tensor(name, quantize(array, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, array)

    # Residual dimension 0 is a constant +1 carried from the embedding (no layer writes it).
    embd = normal(n_vocab, n_embd, std=1.0)
    embd[:, 0] = 1.0
    add_matrix("token_embd.weight", embd)
    for layer in range(config.num_hidden_layers):
        blk = f"blk.{layer}"
        attn_out = normal(n_embd, q_rows, std=0.02)
        attn_out[0, :] = 0.0
        ffn_down = normal(n_embd, n_ff, std=0.02)
        ffn_down[0, :] = 0.0
        writer.add_tensor(f"{blk}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        add_matrix(f"{blk}.attn_q.weight", normal(q_rows, n_embd, std=0.1))
        add_matrix(f"{blk}.attn_k.weight", normal(kv_rows, n_embd, std=0.1))
        add_matrix(f"{blk}.attn_v.weight", normal(kv_rows, n_embd, std=0.1))
        add_matrix(f"{blk}.attn_output.weight", attn_out)
        writer.add_tensor(f"{blk}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        add_matrix(f"{blk}.ffn_gate.weight", normal(n_ff, n_embd, std=0.1))
        add_matrix(f"{blk}.ffn_up.weight", normal(n_ff, n_embd, std=0.1))
        add_matrix(f"{blk}.ffn_down.weight", ffn_down)
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    output = normal(n_vocab, n_embd, std=n_embd**-0.5)  # logits ~ N(0, 1): varied text
    output[:, 0] = 0.0
    for suppressed in (slice(0, FIRST_CHAR_ID), slice(n_chars_end, n_vocab)):
        output[suppressed, :] = 0.0
        output[suppressed, 0] = -SUPPRESS_LOGIT
    add_matrix("output.weight", output)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
