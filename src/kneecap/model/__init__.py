"""Models: what a checkpoint is, read from config.json, GGUF metadata or a preset.

spec.py holds the Model record; kv.py the KV-cache formula per attention kind;
weights.py weight bytes per dtype; the readers build a Model from files.
"""

from kneecap.model.spec import LAYER_KINDS, Model

__all__ = ["LAYER_KINDS", "Model"]
