"""A GGUF file -> Model: architecture from the `<arch>.*` metadata keys, parameters and bytes from the tensors.

Owns reading GGUF (with the `gguf` package's GGUFReader, imported only here) and mapping llama.cpp tensor
names onto kneecap.model.params.PARTS; the KV formula itself stays in kv.py. Parameter counts are the
tensors' element counts and weight bytes are the tensors' data sizes, so both are exact for the file.
Every GGML tensor type is read (f32, f16, bf16, q8_0, q4_0 .. q5_1, the k-quants, the iq families, tq1_0/tq2_0,
mxfp4): a tensor's bytes are the gguf package's size for its type, so a mix such as Q4_K_M is exact too. The
model's weight_dtype is the file type llama.cpp wrote (general.file_type, e.g. "q4_k_m"; named as
kneecap.model.weights.file_type_name does), or the tensor type holding most bytes when the key is absent.
Key names: gguf.constants.Keys (e.g. `llama.block_count`, `llama.attention.head_count_kv`,
`deepseek2.attention.kv_lora_rank`, `gemma3.attention.sliding_window`, `qwen3next.full_attention_interval`).
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from pathlib import Path

from kneecap.errors import KneecapError
from kneecap.model.params import PARTS
from kneecap.model.spec import MAX_LAYERS, Model

_LAYER_TENSOR = re.compile(r"^blk\.(\d+)\.([^.]+)")
_LAYER_NORMS = (
    "attn_norm",
    "ffn_norm",
    "post_attention_norm",
    "post_ffw_norm",
    "attn_post_norm",
    "ffn_post_norm",
    "layer_output_norm",
    "attn_norm_2",
)


def read_gguf(path: str | Path) -> Model:
    """Read a .gguf file's metadata and tensor table (no tensor data is loaded)."""
    try:
        from gguf import GGUFReader
    except ImportError:  # pragma: no cover - gguf is a declared dependency
        raise KneecapError("reading .gguf files needs the gguf package", "pip install gguf") from None
    path = Path(path)
    try:
        reader = GGUFReader(str(path), "r")
    except (ValueError, OSError, IndexError, KeyError, TypeError) as exc:
        short = _where_short(path)
        if short:
            raise KneecapError(
                f"{path}: GGUF file is truncated or corrupt: {short}",
                "re-download it (compare its size with the source's) or re-convert it; `gguf-dump FILE` shows "
                "how far it reads",
            ) from None
        reason = " ".join(str(exc).split())[:120] or type(exc).__name__
        raise KneecapError(
            f"{path}: not a readable GGUF file ({reason})",
            "check the file (a partial download?) or pass its config.json instead",
        ) from None
    return model_from_gguf(_fields(reader), reader.tensors, source=str(path), default_name=path.stem)


def _fields(reader) -> dict:
    out = {}
    for name, field in reader.fields.items():
        if name.startswith("tokenizer.ggml.") and name != "tokenizer.ggml.tokens":
            continue
        try:
            out[name] = field.contents()
        except Exception:  # noqa: BLE001 - an undecodable field we do not need
            continue
    if "tokenizer.ggml.tokens" in out:
        out["tokenizer.ggml.tokens"] = len(out["tokenizer.ggml.tokens"])
    return out


# Metadata of a shape llama.cpp never writes (found by tests/fuzz) ends as a one-line KneecapError.
_SHAPE_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError, OverflowError)


def model_from_gguf(meta: dict, tensors, *, source: str, default_name: str) -> Model:
    """Build a Model from decoded GGUF metadata and its tensor table (objects with name, n_elements, n_bytes,
    tensor_type)."""
    try:
        return _model_from_gguf(meta, tensors, source=source, default_name=default_name)
    except _SHAPE_ERRORS as exc:
        raise KneecapError(
            f"{source}: GGUF metadata has a type or value kneecap cannot use "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]})",
            "re-convert the model with a current llama.cpp, or pass its config.json",
        ) from None


def _model_from_gguf(meta: dict, tensors, *, source: str, default_name: str) -> Model:
    arch = meta.get("general.architecture")
    if not arch:
        raise KneecapError(f"{source}: GGUF has no general.architecture", "re-convert the model with llama.cpp")

    def key(name: str, required: bool = True):
        value = meta.get(f"{arch}.{name}")
        if isinstance(value, list):
            value = max((v for v in value if v), default=0)
        if value is None and required:
            raise KneecapError(
                f"{source}: GGUF has no {arch}.{name}, which the memory formula needs",
                "re-convert with a current llama.cpp, or pass the model's config.json",
            )
        if value is not None and (not isinstance(value, int) or value <= 0) and required:
            raise KneecapError(
                f"{source}: {arch}.{name} must be a positive integer, got {value!r}",
                "re-convert the model, or pass its config.json",
            )
        return value

    num_layers = key("block_count")
    if num_layers > MAX_LAYERS:  # per-layer lists are built below: bound them
        raise KneecapError(
            f"{source}: {arch}.block_count {num_layers} is not a plausible layer count (> {MAX_LAYERS:,})",
            "the file is corrupt: re-download or re-convert it",
        )
    hidden = key("embedding_length")
    heads = key("attention.head_count")
    kv_heads = key("attention.head_count_kv", required=False) or heads
    head_dim = key("attention.key_length", required=False) or hidden // heads
    vocab = (
        key("vocab_size", required=False) or meta.get("tokenizer.ggml.tokens") or _vocab_from_tensors(tensors, hidden)
    )
    if not vocab:
        raise KneecapError(f"{source}: cannot tell the vocabulary size", "the GGUF has no token_embd tensor or tokens")
    notes: list[str] = []
    blocks, window = _layer_kinds(meta, arch, num_layers, source, notes)
    kinds = [k for k in blocks if k != "mlp"]  # MLP-only blocks (Nemotron-H) cache nothing: folded away
    kv_lora = key("attention.kv_lora_rank", required=False)
    rope_dim = key("rope.dimension_count", required=False)
    if "mla" in kinds:
        if not kv_lora or not rope_dim:
            raise KneecapError(
                f"{source}: MLA model without {arch}.attention.kv_lora_rank / rope.dimension_count",
                "re-convert with a current llama.cpp",
            )
        head_dim = _mla_key_length(key) or head_dim

    parts, part_bytes, types_by_part, experts_by_layer = _tally(tensors, blocks)
    total = sum(parts.values())
    num_experts = key("expert_count", required=False) or 0
    top_k = key("expert_used_count", required=False) or 0
    moe_layers = [layer for layer, n in experts_by_layer.items() if n]
    expert_params = experts_by_layer[moe_layers[0]] // num_experts if moe_layers and num_experts else 0
    active = total - len(moe_layers) * max(0, num_experts - top_k) * expert_params if moe_layers else total
    dtypes = {p: (types_by_part[p].most_common(1)[0][0] if types_by_part[p] else "f32") for p in PARTS}
    all_types = Counter()
    for counter in types_by_part.values():
        all_types.update(counter)
    state = _linear_state_bytes(meta, arch, notes) if "linear_attention" in kinds else 0
    if len(kinds) < len(blocks):
        notes.append(
            f"{len(blocks)} blocks, {len(blocks) - len(kinds)} of them MLP-only (no cache): "
            f"folded away, {len(kinds)} layers here"
        )
    if "linear_attention" in kinds and not state:
        raise KneecapError(
            f"{source}: linear-attention layers but no {arch}.ssm.* keys",
            "re-convert with a current llama.cpp, or pass the model's config.json",
        )
    notes.append(
        f"GGUF: {total:,} parameters and {sum(part_bytes.values()):,} weight bytes counted from the "
        f"tensor table (exact for this file)"
    )
    return Model(
        name=str(meta.get("general.name") or default_name),
        source=source,
        architecture=str(arch),
        num_hidden_layers=len(kinds),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=int(vocab),
        layer_types=tuple(kinds),
        total_params=total,
        active_params=active,
        max_position_embeddings=key("context_length", required=False),
        intermediate_size=key("feed_forward_length", required=False),
        sliding_window=window,
        kv_lora_rank=kv_lora if "mla" in kinds else None,
        qk_rope_head_dim=rope_dim if "mla" in kinds else None,
        q_lora_rank=key("attention.q_lora_rank", required=False) if "mla" in kinds else None,
        v_head_dim=_mla_value_length(key) if "mla" in kinds else None,
        linear_state_bytes_per_layer=state,
        num_experts=num_experts if moe_layers else 0,
        num_experts_per_tok=top_k if moe_layers else 0,
        num_shared_experts=(key("expert_shared_count", required=False) or 0) if moe_layers else 0,
        expert_params=expert_params,
        num_moe_layers=len(moe_layers),
        checkpoint_bytes=sum(part_bytes.values()),
        weight_dtype=_file_type(meta) or (all_types.most_common(1)[0][0] if all_types else None),
        notes=tuple(notes),
        param_parts=tuple((p, parts[p]) for p in PARTS),
        part_dtypes=tuple((p, dtypes[p]) for p in PARTS),
        part_bytes=tuple((p, part_bytes[p]) for p in PARTS),
    )


def _file_type(meta: dict) -> str | None:
    """general.file_type as llama.cpp names it ("q4_k_m"), when the file states one kneecap can price."""
    from kneecap.model.weights import file_type_name

    value = meta.get("general.file_type")
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return file_type_name(value)


def _mla_key_length(key) -> int | None:
    """An MLA model's per-head q/k width (qk_nope_head_dim + qk_rope_head_dim, the head_dim of its config.json).

    Current llama.cpp converters serve MLA as MQA over the latent: they write attention.key_length as
    kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3) and the per-head width as attention.key_length_mla (192)
    (llama.cpp conversion/deepseek.py:349-353, vendored in the llama-cpp-python 0.3.36 sdist; gguf-py
    constants.py:179-180 in gguf 0.19.0). Older files, without key_length_mla, wrote the per-head width as
    key_length."""
    return key("attention.key_length_mla", required=False) or key("attention.key_length", required=False)


def _mla_value_length(key) -> int | None:
    """An MLA model's v_head_dim: llama.cpp's converter writes it as attention.value_length_mla since it serves MLA
    as MQA over the latent (value_length then being kv_lora_rank); older files, without key_length_mla, wrote it as
    value_length (convert_hf_to_gguf.py DeepseekV2Model.set_gguf_parameters)."""
    if key("attention.key_length_mla", required=False) or key("attention.value_length_mla", required=False):
        return key("attention.value_length_mla", required=False)
    return key("attention.value_length", required=False)


def _vocab_from_tensors(tensors, hidden: int) -> int | None:
    for t in tensors:
        if t.name == "token_embd.weight":
            dims = [int(d) for d in t.shape]
            others = [d for d in dims if d != hidden]
            return others[0] if others else dims[-1]
    return None


def _layer_kinds(meta: dict, arch: str, n: int, source: str, notes: list[str]) -> tuple[list[str], int | None]:
    if arch in ("deepseek2", "deepseek3", "kimi-k2") or meta.get(f"{arch}.attention.kv_lora_rank"):
        return ["mla"] * n, None
    interval = meta.get(f"{arch}.full_attention_interval")
    kv_per_layer = meta.get(f"{arch}.attention.head_count_kv")
    if isinstance(kv_per_layer, list) and len(kv_per_layer) == n and 0 in kv_per_layer:
        # llama.cpp hybrids (jamba, nemotron_h, granitehybrid): head_count_kv 0 marks a layer without attention;
        # it is recurrent unless it has a feed-forward (Nemotron-H MLP-only block)
        ff = meta.get(f"{arch}.feed_forward_length")
        ff = ff if isinstance(ff, list) and len(ff) == n and arch == "nemotron_h" else [0] * n
        return [
            "full_attention" if kv_per_layer[i] else ("mlp" if ff[i] else "linear_attention") for i in range(n)
        ], None
    if interval:
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)], None
    window = meta.get(f"{arch}.attention.sliding_window")
    if not window:
        return ["full_attention"] * n, None
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list) and len(pattern) == n:
        kinds = ["sliding_attention" if p else "full_attention" for p in pattern]
    # llama.cpp src/llama-hparams.cpp set_swa_pattern(n): layer il slides when il % n < n - 1
    elif isinstance(pattern, int) and pattern > 0:  # every pattern-th layer global
        kinds = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    elif arch == "gemma3":  # llama.cpp: hparams.set_swa_pattern(6)
        kinds = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
    elif arch in ("gemma2", "gpt-oss"):  # llama.cpp: set_swa_pattern(2), first layer sliding
        kinds = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    else:
        kinds = ["sliding_attention"] * n
        notes.append(f"{arch}.attention.sliding_window {window} with no pattern: every layer treated as sliding")
    return kinds, int(window)


def _part_of(name: str, kinds: list[str]) -> tuple[str, int | None]:
    if name.startswith(("token_embd_norm", "output_norm")):
        return "norms", None
    if name.startswith("token_embd"):
        return "embed", None
    if name.startswith("output."):
        return "lm_head", None
    match = _LAYER_TENSOR.match(name)
    if not match:
        return "other", None
    layer, kind = int(match.group(1)), match.group(2)
    if layer >= len(kinds):
        return "other", layer  # e.g. an MTP / nextn layer beyond block_count
    if kind in _LAYER_NORMS:
        return "norms", layer
    if kind.endswith(("_exps", "_exps_b")):
        return "routed_experts", layer
    if "shexp" in kind:
        return "shared_experts", layer
    if kind in ("ffn_gate_inp", "exp_probs_b", "ffn_gate_inp_b"):
        return "router", layer
    if kind.startswith("ffn_"):
        return "dense_mlp", layer
    if kind.startswith(("attn_", "ssm_")):
        return ("linear_attention" if kinds[layer] == "linear_attention" else "attention"), layer
    return "other", layer


def _tally(tensors, kinds: list[str]):
    parts = dict.fromkeys(PARTS, 0)
    part_bytes = dict.fromkeys(PARTS, 0)
    types = {p: Counter() for p in PARTS}
    experts_by_layer: dict[int, int] = {}
    for t in tensors:
        part, layer = _part_of(t.name, kinds)
        n = int(t.n_elements)
        parts[part] += n
        part_bytes[part] += int(t.n_bytes)
        types[part][t.tensor_type.name.lower()] += int(t.n_bytes)
        if layer is not None:
            experts_by_layer[layer] = experts_by_layer.get(layer, 0) + (n if part == "routed_experts" else 0)
    return parts, part_bytes, types, experts_by_layer


_MAMBA1_ARCHS = ("jamba", "mamba")


def _linear_state_bytes(meta: dict, arch: str, notes: list[str]) -> int:
    """Recurrent state per layer from the ssm.* keys; llama.cpp keeps conv and SSM states in f32 (4 B).

    Gated DeltaNet (qwen3next): see hf_config.linear_state_bytes_per_layer; Mamba-1: inner x (conv - 1) +
    inner x state; Mamba-2: (inner + 2 x groups x state) x (conv - 1) + inner x state (elements).
    """
    conv = meta.get(f"{arch}.ssm.conv_kernel")
    inner = meta.get(f"{arch}.ssm.inner_size")
    state = meta.get(f"{arch}.ssm.state_size")
    if arch != "qwen3next" and all(isinstance(v, int) and v > 0 for v in (conv, inner, state)):
        groups = meta.get(f"{arch}.ssm.group_count") or 0
        conv_dim = inner if arch in _MAMBA1_ARCHS else inner + 2 * groups * state
        notes.append("Mamba state from ssm.* keys, held in f32 as llama.cpp does (conv + SSM state)")
        return (conv_dim * (conv - 1) + inner * state) * 4
    dk = meta.get(f"{arch}.ssm.state_size")  # head_k_dim
    nk = meta.get(f"{arch}.ssm.group_count")  # num_k_heads
    nv = meta.get(f"{arch}.ssm.time_step_rank")  # num_v_heads; inner_size is num_v_heads x head_v_dim
    if not all(isinstance(v, int) and v > 0 for v in (conv, dk, nk, nv, inner)):
        return 0
    dv = inner // nv
    notes.append("linear-attention state from ssm.* keys, held in f32 as llama.cpp does (recurrent + conv state)")
    return nv * dv * dk * 4 + (conv - 1) * (2 * nk * dk + nv * dv) * 4


# GGUF layout, as gguf-py's GGUFReader walks it (gguf 0.19.0 gguf/gguf_reader.py:132-184, 217-316; the format is
# ggml docs/gguf.md): magic u32, version u32, tensor_count u64, kv_count u64; kv_count entries of key (u64 length +
# bytes), value type u32, value; tensor_count infos of name, n_dims u32, dims u64 x n_dims, type u32, offset u64;
# padding to general.alignment (32 by default); then the tensor data, each tensor at data start + its offset.
# Value types (gguf/constants.py GGUFValueType): 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string,
# 9 array (item type u32, count u64, items), 10 u64, 11 i64, 12 f64.
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class _Short(Exception):
    """The file ends (or a length runs) past its last byte while reading `what`."""

    def __init__(self, what: str, offset: int):
        super().__init__(what)
        self.what, self.offset = what, offset


def _where_short(path: Path) -> str | None:
    """Where a GGUF file that gguf's reader refused ends short: 'the file ends at byte N, inside <field>', or
    'tensor T needs bytes up to N but the file has M'; None when the layout is whole (the fault is elsewhere)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            return _walk(fh, size)
    except _Short as short:
        return f"its {size:,} bytes end inside {short.what} (which starts at byte {short.offset:,})"
    except (OSError, ValueError, struct.error):
        return None


def _walk(fh, size: int) -> str | None:
    state = {"pos": 0}

    def take(n: int, what: str) -> bytes:
        start = state["pos"]
        if n < 0 or start + n > size:
            raise _Short(what, start)
        data = fh.read(n)
        if len(data) != n:
            raise _Short(what, start)
        state["pos"] = start + n
        return data

    def skip(n: int, what: str) -> None:
        start = state["pos"]
        if n < 0 or start + n > size:
            raise _Short(what, start)
        fh.seek(start + n)
        state["pos"] = start + n

    def u32(what: str) -> int:
        return struct.unpack("<I", take(4, what))[0]

    def u64(what: str) -> int:
        return struct.unpack("<Q", take(8, what))[0]

    def string(what: str) -> str:
        n = u64(f"the length of {what}")
        return take(n, what).decode("utf-8", "replace")

    def value(vtype: int, what: str, depth: int = 0) -> object:
        if vtype in _SCALAR_SIZES:
            raw = take(_SCALAR_SIZES[vtype], what)
            return int.from_bytes(raw, "little") if vtype == 4 else None
        if vtype == _STRING:
            string(what)
            return None
        if vtype == _ARRAY and depth < 4:
            itype = u32(f"the item type of {what}")
            count = u64(f"the length of {what}")
            if itype in _SCALAR_SIZES:
                skip(count * _SCALAR_SIZES[itype], what)
            else:
                for i in range(count):
                    value(itype, f"item {i:,} of {what}", depth + 1)
            return None
        raise ValueError(f"unknown value type {vtype}")

    if size == 0:
        raise _Short("the header (the file is empty)", 0)
    if take(4, "the header's magic number") != b"GGUF":
        return None
    u32("the header's version")
    n_tensors = u64("the header's tensor count")
    n_kv = u64("the header's metadata count")
    alignment = 32
    for i in range(n_kv):
        where = f"metadata entry {i + 1:,} of {n_kv:,}"
        key = string(f"the key of {where}")
        where = f"{where} ({key!r})"
        vtype = u32(f"the value type of {where}")
        got = value(vtype, f"the value of {where}")
        if key == "general.alignment" and vtype == 4 and got:
            alignment = got
    infos = []
    for i in range(n_tensors):
        where = f"tensor info {i + 1:,} of {n_tensors:,}"
        name = string(f"the name of {where}")
        where = f"{where} ({name!r})"
        n_dims = u32(f"the dimension count of {where}")
        if n_dims > 8:
            return None
        dims = [u64(f"the dimensions of {where}") for _ in range(n_dims)]
        ggml_type = u32(f"the type of {where}")
        infos.append((name, dims, ggml_type, u64(f"the data offset of {where}")))
    data_start = -(-state["pos"] // alignment) * alignment
    return _tensor_past_end(infos, data_start, size)


def _tensor_past_end(infos, data_start: int, size: int) -> str | None:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    worst = None
    for name, dims, ggml_type, offset in infos:
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
        except (ValueError, KeyError):
            return None
        n = 1
        for d in dims:
            n *= d
        end = data_start + offset + n * type_size // block
        if end > size and (worst is None or end > worst[1]):
            worst = (name, end)
    if worst is None:
        return None
    return (
        f"tensor {worst[0]!r} needs bytes up to {worst[1]:,} but the file has {size:,} "
        f"({worst[1] - size:,} bytes missing)"
    )
