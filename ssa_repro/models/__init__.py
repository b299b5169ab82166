"""Models, chosen by name (``model=gpt2|attn_only|ff_only``)."""

from ssa_repro.models.transformer import MODELS, Transformer, build_model, count_parameters

__all__ = ["MODELS", "Transformer", "build_model", "count_parameters"]
