"""Models: what a checkpoint is, read from config.json, GGUF metadata or a preset.

spec.py holds the Model record; kv.py the KV-cache formula per attention kind;
weights.py weight bytes per dtype; hf_config.py / gguf_reader.py / presets.py build a Model;
params.py counts parameters per part; resolve.py turns a user's spec into a Model.
"""

from kneecap.model.spec import LAYER_KINDS, Model


def load_model(spec: str, **kwargs) -> Model:
    """A preset name, a config.json / model folder, a .gguf file or an org/name hub id -> Model."""
    from kneecap.model.resolve import load_model as _load

    return _load(spec, **kwargs)


def __getattr__(name: str):  # lazy re-exports keep `import kneecap.model` light
    if name in ("from_hf_config",):
        from kneecap.model import hf_config

        return getattr(hf_config, name)
    if name in ("param_breakdown", "part_dtypes", "weight_bytes_by_part", "total_weight_bytes", "PARTS"):
        from kneecap.model import params

        return getattr(params, name)
    if name in ("preset_names", "load_preset"):
        from kneecap.model import presets

        return getattr(presets, name)
    raise AttributeError(f"module 'kneecap.model' has no attribute {name!r}")


__all__ = [
    "LAYER_KINDS",
    "Model",
    "load_model",
    "from_hf_config",
    "param_breakdown",
    "part_dtypes",
    "weight_bytes_by_part",
    "total_weight_bytes",
    "preset_names",
    "load_preset",
    "PARTS",
]
