"""A key given twice in one object of a JSON file the user hands kneecap is an error naming the file, the key and
its line: json keeps the last of two equal keys without a word, so a pasted line would change a setting silently."""

from __future__ import annotations

import json

import pytest

from kneecap.errors import KneecapError
from kneecap.list_file import read_list_file, strict_json

TWICE = '{\n  "mfu": 0.4,\n  "bw_efficiency": 0.7,\n  "mfu": 0.9\n}\n'


def test_strict_json_names_the_key_and_the_line_of_its_second_appearance():
    with pytest.raises(KneecapError) as exc:
        strict_json(TWICE, "f.json")
    assert exc.value.message == "f.json:4: 'mfu' is given twice in one object"
    nested = '{"a": 1,\n "b": {"a": 2,\n  "c": [{"a": 3}, {"a": 4,\n "a": 5}]}}'
    with pytest.raises(KneecapError, match=r"^f.json:4: 'a' is given twice"):
        strict_json(nested, "f.json")
    # the same key in different objects, in strings and as a value is fine; the result is json's
    ok = '{"a": {"a": "a"}, "b": [{"a": 1}, {"a": 2}], "c": "\\"a\\": 1"}'
    assert strict_json(ok, "f.json") == json.loads(ok)


def test_step_params_file(tmp_path):
    from kneecap.sim.step_params import parse_step_params

    path = tmp_path / "calib.json"
    path.write_text('{"step_time": {\n"mfu": 0.4,\n"mfu": 0.9}}')
    with pytest.raises(KneecapError) as exc:
        parse_step_params(str(path))
    assert exc.value.message == f"step-time file {path}:3: 'mfu' is given twice in one object"


def test_list_file(tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text('[{"preset": "llama-3.1-8b",\n "gpu": "h100-sxm", "gpu": "h200"}]')
    with pytest.raises(KneecapError) as exc:
        read_list_file(grid, "--grid", None, "configurations", "fix it", mappings=True)
    assert exc.value.message == f"--grid file {grid}:2: 'gpu' is given twice in one object"


def test_prices_file(tmp_path):
    from kneecap.recommend.prices import load_prices

    path = tmp_path / "prices.json"
    path.write_text('{"h100-sxm": 3.29,\n "h100-sxm": 2.0}')
    with pytest.raises(KneecapError) as exc:
        load_prices(path)
    assert exc.value.message == f"--prices file {path}:2: 'h100-sxm' is given twice in one object"


def test_model_config_json_keeps_the_last_value_as_the_engines_do(tmp_path):
    """A checkpoint's config.json is read as transformers and vLLM read it (json.load: the last of two equal keys),
    not refused: the plan describes what the engine would serve from the file its author published."""
    from kneecap.model import load_model

    path = tmp_path / "config.json"
    path.write_text(
        '{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, '
        '"intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,\n'
        ' "num_hidden_layers": 32,\n "num_hidden_layers": 16}'
    )
    assert load_model(str(path)).num_hidden_layers == 16
