"""org/name ids: the local Hugging Face cache layout, offline and unreachable-Hub errors (no network needed)."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from kneecap.errors import KneecapError
from kneecap.model import load_model

pytest.importorskip("huggingface_hub")

CONFIGS = Path(__file__).parent / "configs"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _fake_cache(root: Path, repo_id: str, with_index: bool) -> Path:
    """huggingface_hub's cache layout: models--org--name/{refs/main, snapshots/<commit>/<file>}."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    shutil.copy(CONFIGS / "qwen3-0.6b.json", snap / "config.json")
    if with_index:
        (snap / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 1_192_099_840}}))
    return root


def test_reads_config_from_local_cache(tmp_path):
    cache = _fake_cache(tmp_path, "Qwen/Qwen3-0.6B", with_index=True)
    model = load_model("Qwen/Qwen3-0.6B", cache_dir=str(cache), offline=True)
    assert model.name == "Qwen/Qwen3-0.6B"
    assert model.total_params == 596_049_920  # same as the fixture (see test_hf_configs)
    assert model.checkpoint_bytes == 1_192_099_840


def test_offline_and_not_cached(tmp_path):
    with pytest.raises(KneecapError) as info:
        load_model("someorg/not-cached", cache_dir=str(tmp_path), offline=True)
    assert "not in the local Hugging Face cache" in info.value.message
    assert "preset" in info.value.hint and "config.json" in info.value.hint


def test_cli_offline_env(cli, tmp_path):
    result = cli(
        "plan",
        "--model",
        "someorg/not-cached",
        "--gpu",
        "h100-sxm",
        env={"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path), "HF_HOME": str(tmp_path)},
    )
    assert result.code == 2
    assert result.stderr.count("\n") == 1 and "HF_HUB_OFFLINE" in result.stderr


def test_cli_unreachable_hub_is_one_fast_line(cli, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = cli(
        "plan",
        "--model",
        "someorg/not-cached",
        "--gpu",
        "h100-sxm",
        timeout=60,
        env={
            "HF_ENDPOINT": f"http://127.0.0.1:{port}",
            "HF_HUB_CACHE": str(tmp_path),
            "HF_HOME": str(tmp_path),
            "HF_HUB_OFFLINE": "0",
        },
    )
    assert result.code == 2
    assert result.stderr.count("\n") == 1 and "cannot be reached" in result.stderr
