"""Every bad model input is one KneecapError line naming the problem and the fix (never a traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneecap.errors import KneecapError
from kneecap.model import load_model

CONFIGS = Path(__file__).parent / "configs"
GOOD = json.loads((CONFIGS / "qwen3-0.6b.json").read_text())


def _write(tmp_path: Path, cfg, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg, indent=2))
    return path


def _error(spec: str, **kwargs) -> KneecapError:
    with pytest.raises(KneecapError) as info:
        load_model(spec, **kwargs)
    line = info.value.one_line()
    assert "\n" not in line and line.startswith("error: ")
    return info.value


@pytest.mark.parametrize("field", ["num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"])
def test_missing_field_names_field_and_file(tmp_path, field):
    cfg = {k: v for k, v in GOOD.items() if k != field}
    path = _write(tmp_path, cfg)
    err = _error(str(path))
    assert field in err.message and str(path) in err.message
    assert field in err.hint


def test_missing_mla_field(tmp_path):
    from kneecap.model.presets import preset_data

    cfg = preset_data("deepseek-v3")["config"]
    del cfg["kv_lora_rank"]
    err = _error(str(_write(tmp_path, cfg)))
    assert "kv_lora_rank" in err.message


def test_missing_linear_attention_field(tmp_path):
    from kneecap.model.presets import preset_data

    cfg = preset_data("qwen3-next-80b-a3b")["config"]
    del cfg["linear_num_value_heads"]
    assert "linear_num_value_heads" in _error(str(_write(tmp_path, cfg))).message


def test_unknown_model_type_with_decoder_fields_plans_as_a_generic_decoder(tmp_path):
    model = load_model(str(_write(tmp_path, dict(GOOD, model_type="newdecoder", architectures=["NewForCausalLM"]))))
    assert any("'newdecoder'" in n and "generic decoder" in n for n in model.notes)
    # Qwen3-0.6B's fields: 28 layers x 2 x 8 KV heads x head_dim 128 x 2 B = 114,688
    from kneecap.model.kv import kv_bytes_per_token

    assert kv_bytes_per_token(model, 2) == 114_688


@pytest.mark.parametrize("field", ["num_hidden_layers", "hidden_size", "num_attention_heads"])
def test_unknown_model_type_missing_a_decoder_field_names_it(tmp_path, field):
    cfg = {k: v for k, v in GOOD.items() if k != field}
    err = _error(str(_write(tmp_path, dict(cfg, model_type="rwkv7", architectures=["Rwkv7ForCausalLM"]))))
    assert "rwkv7" in err.message and "Rwkv7ForCausalLM" in err.message and repr(field) in err.message
    assert field in err.hint and "llama" in err.hint and "deepseek_v3" in err.hint and "preset" in err.hint


@pytest.mark.parametrize(
    "extra",
    [
        {"mamba_d_state": 16},
        {"hybrid_override_pattern": "M*"},
        {"layer_types": ["mamba"] * 28},
        {"cross_attention_layers": [3, 8]},
    ],
)
def test_unknown_model_type_that_is_not_a_plain_decoder_is_refused(tmp_path, extra):
    err = _error(str(_write(tmp_path, dict(GOOD, model_type="hybridthing", **extra))))
    assert "hybridthing" in err.message and "not a plain decoder" in err.message and next(iter(extra)) in err.message


def test_no_model_type(tmp_path):
    cfg = {k: v for k, v in GOOD.items() if k != "model_type"}
    err = _error(str(_write(tmp_path, cfg)))
    assert "model_type" in err.message


def test_malformed_json_gives_file_and_line(tmp_path):
    text = json.dumps(GOOD, indent=2).replace('"hidden_size": 1024,', '"hidden_size": 1024,,')
    path = _write(tmp_path, text)
    err = _error(str(path))
    line = text.splitlines().index('  "hidden_size": 1024,,') + 1
    assert str(path) in err.message and f"line {line}" in err.message


def test_json_that_is_not_an_object(tmp_path):
    err = _error(str(_write(tmp_path, "[1, 2]")))
    assert "JSON object" in err.message


def test_unreadable_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe\x00not utf-8")
    err = _error(str(path))
    assert "cannot read" in err.message and str(path) in err.message


@pytest.mark.parametrize(
    "field,value",
    [
        ("num_attention_heads", 0),
        ("hidden_size", -4096),
        ("num_hidden_layers", "28"),
        ("num_key_value_heads", 0),
        ("head_dim", -1),
        ("vocab_size", 1.5),
    ],
)
def test_zero_negative_or_non_integer(tmp_path, field, value):
    err = _error(str(_write(tmp_path, dict(GOOD, **{field: value}))))
    assert field in err.message and repr(value) in err.message


def test_bad_expert_and_window_numbers(tmp_path):
    from kneecap.model.presets import preset_data

    cfg = preset_data("mixtral-8x7b")["config"]
    err = _error(str(_write(tmp_path, dict(cfg, num_experts_per_tok=0))))
    assert "num_experts_per_tok" in err.message
    cfg = preset_data("gpt-oss-20b")["config"]
    err = _error(str(_write(tmp_path, dict(cfg, sliding_window=0))))
    assert "sliding_window" in err.message


def test_layer_types_wrong_length_or_kind(tmp_path):
    err = _error(str(_write(tmp_path, dict(GOOD, layer_types=["full_attention"] * 3))))
    assert "layer_types" in err.message and "28" in err.message
    err = _error(str(_write(tmp_path, dict(GOOD, layer_types=["mamba"] * 28))))
    assert "mamba" in err.message


def test_nonexistent_path_and_unknown_preset(tmp_path):
    assert "no such file" in _error(str(tmp_path / "nope" / "config.json")).message
    err = _error("llama-3.1-8")
    assert "unknown preset" in err.message and "llama-3.1-8b" in err.hint


def test_folder_without_config(tmp_path):
    assert "no config.json" in _error(str(tmp_path)).message


def test_bad_safetensors_index(tmp_path):
    _write(tmp_path, GOOD)
    _write(tmp_path, {"metadata": {"total_size": 0}}, "model.safetensors.index.json")
    err = _error(str(tmp_path))
    assert "total_size" in err.message


def test_garbage_gguf(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"NOTGGUF" * 10)
    err = _error(str(path))
    assert "GGUF" in err.message and str(path) in err.message


def test_cli_prints_one_line_and_exits_2(cli, tmp_path):
    path = _write(tmp_path, dict(GOOD, num_attention_heads=0))
    result = cli("plan", "--model", str(path), "--gpu", "h100-sxm")
    assert result.code == 2
    assert result.stderr.count("\n") == 1 and "num_attention_heads" in result.stderr
    assert "Traceback" not in result.stderr


def test_nemotron_h_pattern_errors(tmp_path):
    cfg = json.loads((CONFIGS / "nemotron-h-8b-base-8k.json").read_text())
    err = _error(str(_write(tmp_path, dict(cfg, hybrid_override_pattern="M*-"))))
    assert "hybrid_override_pattern" in err.message and "52" in err.message
    err = _error(str(_write(tmp_path, dict(cfg, hybrid_override_pattern="ME" * 26))))
    assert "MoE blocks" in err.message
    err = _error(str(_write(tmp_path, {k: v for k, v in cfg.items() if k != "ssm_state_size"})))
    assert "ssm_state_size" in err.message


@pytest.mark.skipif(
    not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
    reason="root reads files whatever their mode",
)
def test_permission_denied(tmp_path):
    path = _write(tmp_path, GOOD)
    path.chmod(0)
    try:
        err = _error(str(path))
        assert "cannot read" in err.message and "ermission" in err.message
    finally:
        path.chmod(0o644)
