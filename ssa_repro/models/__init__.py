"""Models, chosen by name (``model=gpt2|attn_only|ff_only``)."""

from ssa_repro.models.decoder import MODELS, Decoder, build_model, count_parameters

__all__ = ["MODELS", "Decoder", "build_model", "count_parameters"]
