"""Any scorer of the registry inside a Hugging Face ``transformers`` model (the ``hf`` extra).

``attach(model, scorer="ssa", **keys)`` adds the scorer's parameters to each attention module and
routes the model's attention through :func:`ssa_repro.hf.attention.scorer_attention`; ``load_pretrained``
reads back a model saved with ``save_pretrained`` after ``attach``; ``presets()`` lists the scorer
options of conf/scorer that ``attach`` accepts by name (docs/huggingface.md).
"""

from ssa_repro.hf.attach import ATTN_NAME, AttachError, attach, presets
from ssa_repro.hf.load import load_pretrained

__all__ = ["ATTN_NAME", "AttachError", "attach", "load_pretrained", "presets"]
