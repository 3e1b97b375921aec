"""load_model must stay off numpy / gguf / huggingface_hub until a spec needs them (kneecap plan starts fast)."""

from __future__ import annotations

import subprocess
import sys

CODE = (
    "import sys; from kneecap.model import load_model; m = load_model('{spec}'); "
    "print(sorted(x for x in ('numpy', 'gguf', 'huggingface_hub', 'pydantic') if x in sys.modules))"
)


def _heavy_modules(spec: str) -> str:
    out = subprocess.run([sys.executable, "-c", CODE.format(spec=spec)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_preset_loads_without_heavy_imports():
    assert _heavy_modules("deepseek-v3") == "[]"


def test_config_file_loads_without_heavy_imports():
    from pathlib import Path

    assert _heavy_modules(str(Path(__file__).parent / "configs" / "qwen3-0.6b.json")) == "[]"
