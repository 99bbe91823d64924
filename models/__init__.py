"""The four reference models (see ``models/registry.py`` for sizes) and their fused drop-in variants."""

from .registry import REGISTRY, ModelEntry, get_entry, model_names

__all__ = ["REGISTRY", "ModelEntry", "get_entry", "model_names"]
