"""load_model(spec): a preset name, a config.json (or a folder holding it), a .gguf file, or an org/name hub id.

Owns the I/O around the pure adapters: reading and decoding files (errors name the file and line),
the optional model.safetensors.index.json (metadata.total_size = exact checkpoint bytes) and NVIDIA
ModelOpt's hf_quant_config.json (merged into quantization_config when config.json has none), the local
Hugging Face cache and, when online, fetching config.json with huggingface_hub. Import-light: json and
pathlib only at import time; gguf and huggingface_hub are imported when a spec needs them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from kneecap.errors import KneecapError
from kneecap.model.spec import Model

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
INDEX_FILE = "model.safetensors.index.json"
MODELOPT_FILE = "hf_quant_config.json"  # ModelOpt exports: {"producer": ..., "quantization": {quant_algo, kv_cache_quant_algo, ...}}


def load_model(spec: str, *, cache_dir: str | None = None, offline: bool | None = None) -> Model:
    """Resolve `spec` to a Model.

    Order: a preset name; an existing path (config.json, a folder with config.json [+ index], a .gguf, or a
    folder holding exactly one .gguf); an org/name id from the local HF cache (`cache_dir`, default the
    huggingface_hub cache) or, unless offline (HF_HUB_OFFLINE=1 or offline=True), downloaded config.json.
    Every failure is a one-line KneecapError.
    """
    from kneecap.model.presets import is_preset, load_preset, preset_names

    if not spec or not str(spec).strip():
        raise KneecapError("empty model spec", f"pass a preset ({', '.join(preset_names())}), a path or an org/name id")
    spec = str(spec).strip()
    if is_preset(spec):
        return load_preset(spec)
    path = Path(spec).expanduser()
    if path.exists():
        return load_path(path)
    if _HUB_ID.match(spec) and not spec.endswith((".json", ".gguf")):
        return load_hub(spec, cache_dir=cache_dir, offline=offline)
    if spec.endswith((".json", ".gguf")) or os.sep in spec:
        raise KneecapError(f"no such file: {spec}", "check the path, or use a preset name")
    from kneecap.model.presets import preset_data

    preset_data(spec)  # raises "unknown preset" with did-you-mean suggestions
    raise AssertionError("unreachable")  # pragma: no cover


def load_path(path: Path) -> Model:
    """A config.json file, a folder holding one, a .gguf file, or a folder holding exactly one .gguf."""
    from kneecap.model.gguf_reader import read_gguf

    if path.is_dir():
        config = path / "config.json"
        if config.is_file():
            return load_config_file(config, index=path / INDEX_FILE)
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return read_gguf(ggufs[0])
        what = f"{len(ggufs)} .gguf files" if ggufs else "no config.json"
        raise KneecapError(f"{path}: folder holds {what}", "point at the config.json or at one .gguf file")
    if path.suffix.lower() == ".gguf":
        return read_gguf(path)
    return load_config_file(path, index=path.parent / INDEX_FILE)


def load_config_file(
    path: Path, index: Path | None = None, name: str | None = None, modelopt: Path | None = None
) -> Model:
    """Read config.json (+ the safetensors index and hf_quant_config.json beside it, when present), build the Model."""
    from kneecap.model.hf_config import from_hf_config

    config = read_json(path)
    modelopt = (
        modelopt if modelopt is not None else (path.parent / MODELOPT_FILE if path.name == "config.json" else None)
    )
    if modelopt is not None and modelopt.is_file():
        config = with_modelopt_quantization(config, read_json(modelopt), modelopt)
    checkpoint_bytes = checkpoint_bytes_from_index(index) if index is not None and index.is_file() else None
    model_name = name or (path.parent.name if path.name == "config.json" else path.stem)
    return from_hf_config(config, name=model_name, source=str(path), checkpoint_bytes=checkpoint_bytes)


def read_json(path: Path) -> dict:
    """Parse a JSON file; unreadable or malformed files become one-line errors naming file and line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except IsADirectoryError:
        raise KneecapError(f"{path} is a folder, not a file", "point at the config.json inside it") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise KneecapError(f"cannot read {path}: {reason}", "check the path and its permissions") from None
    try:
        # a key given twice keeps its last value, as the engines read a checkpoint's config (transformers'
        # PretrainedConfig.from_json_file and vLLM call json.load): plan what they would serve, not refuse it
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise KneecapError(
            f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            "fix the JSON (or re-download the file)",
        ) from None
    if not isinstance(data, dict):
        raise KneecapError(
            f"{path}: expected a JSON object, got {type(data).__name__}", "point at the model's config.json"
        )
    return data


def with_modelopt_quantization(config: dict, quant_file: dict, source: Path) -> dict:
    """config.json with ModelOpt's hf_quant_config.json as its quantization_config, when config.json has none.

    vLLM reads the same file for ModelOpt checkpoints (quant_method "modelopt"); e.g. nvidia/Llama-3.1-70B-Instruct-FP8
    ships {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}.
    """
    if config.get("quantization_config"):
        return config
    quantization = quant_file.get("quantization")
    if not isinstance(quantization, dict):
        raise KneecapError(f'{source}: no "quantization" object, as ModelOpt writes it', f"fix or remove {source.name}")
    return {**config, "quantization_config": {"quant_method": "modelopt", **quantization}}


def checkpoint_bytes_from_index(index: Path) -> int:
    """metadata.total_size of model.safetensors.index.json: the exact bytes of the tensor data."""
    data = read_json(index)
    size = (data.get("metadata") or {}).get("total_size")
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
        raise KneecapError(
            f"{index}: metadata.total_size is {size!r}, expected a positive byte count", f"fix or remove {index.name}"
        )
    return int(size)


def load_hub(repo_id: str, *, cache_dir: str | None = None, offline: bool | None = None) -> Model:
    """config.json of a Hugging Face repo: from the local cache, else downloaded when online."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - optional dependency
        raise KneecapError(
            f"{repo_id!r} looks like a Hugging Face id but huggingface_hub is not installed",
            "pip install huggingface_hub, or pass a local config.json or a preset",
        ) from None
    cached = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir)
    if isinstance(cached, str):
        index = try_to_load_from_cache(repo_id, INDEX_FILE, cache_dir=cache_dir)
        modelopt = try_to_load_from_cache(repo_id, MODELOPT_FILE, cache_dir=cache_dir)
        return load_config_file(
            Path(cached),
            index=Path(index) if isinstance(index, str) else None,
            name=repo_id,
            modelopt=Path(modelopt) if isinstance(modelopt, str) else None,
        )
    if offline is None:
        offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    if offline:
        raise KneecapError(
            f"{repo_id}: config.json is not in the local Hugging Face cache and HF_HUB_OFFLINE is set",
            "pass a local config.json / model folder, or a preset name",
        )
    return _download(repo_id, cache_dir)


def _download(repo_id: str, cache_dir: str | None) -> Model:
    import logging

    from huggingface_hub import constants, hf_hub_download

    _check_reachable(constants.ENDPOINT, repo_id)
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.CRITICAL)  # its retry warnings would break the one-line stderr contract
    try:
        try:
            config = hf_hub_download(repo_id, "config.json", cache_dir=cache_dir, etag_timeout=10)
        except Exception as exc:  # network, auth, 404: huggingface_hub raises many types
            raise KneecapError(
                f"cannot fetch config.json for {repo_id}: {_hub_reason(exc)}",
                "check the id and your access, or pass a local config.json / model folder, or a preset name",
            ) from None
        optional: dict[str, Path | None] = {}
        for name in (INDEX_FILE, MODELOPT_FILE):  # single-file checkpoints have no index; only ModelOpt ships its file
            try:
                optional[name] = Path(hf_hub_download(repo_id, name, cache_dir=cache_dir, etag_timeout=10))
            except Exception:
                optional[name] = None
    finally:
        hub_logger.setLevel(level)
    return load_config_file(Path(config), index=optional[INDEX_FILE], name=repo_id, modelopt=optional[MODELOPT_FILE])


def _check_reachable(endpoint: str, repo_id: str, timeout_s: float = 3.0) -> None:
    """Fail fast (one line, no retries) when the Hub's host cannot even be reached."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        raise KneecapError(
            f"{repo_id}: config.json is not in the local Hugging Face cache and {host} cannot be "
            f"reached ({exc.strerror or type(exc).__name__})",
            "offline: pass a local config.json / model folder, or a preset name",
        ) from None


def _hub_reason(exc: Exception) -> str:
    name = type(exc).__name__
    if name in ("RepositoryNotFoundError", "GatedRepoError"):
        return f"{name} (no such repository, or it needs a token: set HF_TOKEN)"
    if name == "EntryNotFoundError":
        return "the repository has no config.json"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{name}: {first[:120]}" if first else name
