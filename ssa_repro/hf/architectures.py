"""Tiny random models of the architectures transformers ships, for checking :func:`ssa_repro.hf.attach`
on each (tests/test_hf.py) and for the table of docs/huggingface.md (``python -m
ssa_repro.hf.architectures`` prints it; a test checks the page holds exactly that table).

Each is built from its config class with tiny sizes (2 layers, width 32, 4 heads, 2 key/value heads
where the architecture has grouped-query heads, vocabulary 100), no download, and with the feature
that makes it different turned on at a size that bites on 8 tokens: sliding windows of 4, Gemma2's
soft-cap at 0.5, Gemma's query_pre_attn_scalar (a scaling override), GPT-OSS's sinks, T5's relative
bias, BLOOM's and Falcon's ALiBi. Dropout is 0 so that train and eval mode agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers as T

from ssa_repro.hf.attach import AttachError, attach, attention_modules, features

VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS = 100, 32, 4, 2, 2
# Weights 10 times transformers' usual 0.02: attention logits of order 1, so that attention is far from
# uniform and a dropped feature (a soft-cap at 0.5, a bias, a window) shows in the output
INIT = 0.2
DECODER = dict(  # the Llama family's keys
    vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=LAYERS,
    num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=64,
    bos_token_id=1, eos_token_id=2, pad_token_id=0, initializer_range=INIT,
)  # fmt: skip
ENCODER = dict(  # BERT's keys
    vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
    intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0, pad_token_id=0, initializer_range=INIT,
)  # fmt: skip


@dataclass(frozen=True)
class Arch:
    """One architecture: ``build()`` -> a tiny random model (eval mode); ``kind``: decoder (causal LM),
    encoder (masked LM) or seq2seq (T5)."""

    name: str
    build: Callable[[], T.PreTrainedModel]
    kind: str


def _gpt_oss():
    cfg = T.GptOssConfig(
        **{**DECODER, "intermediate_size": 32}, head_dim=8, sliding_window=4, num_local_experts=4,
        num_experts_per_tok=2, layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip
    model = T.GptOssForCausalLM(cfg)
    with torch.no_grad():  # sinks start at 0 in some inits: make them matter
        for m in model.modules():
            if isinstance(getattr(m, "sinks", None), torch.nn.Parameter):
                m.sinks.normal_(0.0, 1.0)
    return model


def _make(model: str, config: str, **keys) -> Callable[[], T.PreTrainedModel]:
    """``transformers.<model>(transformers.<config>(**keys))``, deferred."""
    return lambda: getattr(T, model)(getattr(T, config)(**keys))


SPECIAL = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
ARCHITECTURES = [
    Arch(
        "GPT-2",
        _make(
            "GPT2LMHeadModel",
            "GPT2Config",
            n_embd=WIDTH,
            n_layer=LAYERS,
            n_head=HEADS,
            vocab_size=VOCAB,
            n_positions=64,
            attn_pdrop=0.0,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            initializer_range=INIT,
            **SPECIAL,
        ),  # fmt: skip
        "decoder",
    ),
    Arch("Llama", _make("LlamaForCausalLM", "LlamaConfig", **DECODER), "decoder"),
    Arch("Mistral", _make("MistralForCausalLM", "MistralConfig", **DECODER, sliding_window=4), "decoder"),
    Arch(
        "Qwen2",
        _make(
            "Qwen2ForCausalLM",
            "Qwen2Config",
            **DECODER,
            use_sliding_window=True,
            sliding_window=4,
            max_window_layers=1,
        ),  # fmt: skip
        "decoder",
    ),
    Arch("Qwen3", _make("Qwen3ForCausalLM", "Qwen3Config", **DECODER, head_dim=8), "decoder"),
    Arch(
        "Gemma2",
        _make(
            "Gemma2ForCausalLM",
            "Gemma2Config",
            **DECODER,
            head_dim=8,
            sliding_window=4,
            attn_logit_softcapping=0.5,
            query_pre_attn_scalar=16,
        ),  # fmt: skip
        "decoder",
    ),
    Arch(
        "Gemma3 (text)",
        _make(
            "Gemma3ForCausalLM",
            "Gemma3TextConfig",
            **DECODER,
            head_dim=8,
            sliding_window=4,
            query_pre_attn_scalar=16,
        ),  # fmt: skip
        "decoder",
    ),
    Arch("Phi-3", _make("Phi3ForCausalLM", "Phi3Config", **DECODER, sliding_window=4), "decoder"),
    Arch("GPT-OSS", _gpt_oss, "decoder"),
    Arch(
        "OPT",
        _make(
            "OPTForCausalLM",
            "OPTConfig",
            vocab_size=VOCAB,
            hidden_size=WIDTH,
            num_hidden_layers=LAYERS,
            ffn_dim=64,
            num_attention_heads=HEADS,
            max_position_embeddings=64,
            word_embed_proj_dim=WIDTH,
            dropout=0.0,
            attention_dropout=0.0,
            init_std=INIT,
            **SPECIAL,
        ),  # fmt: skip
        "decoder",
    ),
    Arch(
        "GPT-NeoX",
        _make(
            "GPTNeoXForCausalLM",
            "GPTNeoXConfig",
            vocab_size=VOCAB,
            hidden_size=WIDTH,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            intermediate_size=64,
            max_position_embeddings=64,
            initializer_range=INIT,
            bos_token_id=1,
            eos_token_id=2,
        ),  # fmt: skip
        "decoder",
    ),
    Arch(
        "T5",
        _make(
            "T5ForConditionalGeneration",
            "T5Config",
            vocab_size=VOCAB,
            d_model=WIDTH,
            d_kv=8,
            d_ff=64,
            num_layers=LAYERS,
            num_heads=HEADS,
            relative_attention_num_buckets=8,
            dropout_rate=0.0,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=2,
        ),  # fmt: skip
        "seq2seq",
    ),
    Arch("BERT", _make("BertForMaskedLM", "BertConfig", **ENCODER), "encoder"),
    Arch(
        "RoBERTa",
        _make(
            "RobertaForMaskedLM",
            "RobertaConfig",
            **{**ENCODER, "pad_token_id": 1, "max_position_embeddings": 66},
        ),
        "encoder",
    ),
    Arch(
        "DistilBERT",
        _make(
            "DistilBertForMaskedLM",
            "DistilBertConfig",
            vocab_size=VOCAB,
            dim=WIDTH,
            n_layers=LAYERS,
            n_heads=HEADS,
            hidden_dim=64,
            max_position_embeddings=64,
            dropout=0.0,
            attention_dropout=0.0,
            initializer_range=INIT,
            pad_token_id=0,
        ),  # fmt: skip
        "encoder",
    ),
    Arch(
        "ModernBERT",
        _make(
            "ModernBertForMaskedLM",
            "ModernBertConfig",
            vocab_size=VOCAB,
            hidden_size=WIDTH,
            intermediate_size=64,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            local_attention=4,
            global_attn_every_n_layers=2,
            max_position_embeddings=64,
            initializer_range=INIT,
            cls_token_id=1,
            sep_token_id=2,
            mask_token_id=3,
            **SPECIAL,
        ),  # fmt: skip
        "encoder",
    ),
    Arch(
        "BLOOM",
        _make(
            "BloomForCausalLM",
            "BloomConfig",
            vocab_size=VOCAB,
            hidden_size=WIDTH,
            n_layer=LAYERS,
            n_head=HEADS,
        ),
        "decoder",
    ),
    Arch(
        "Falcon (ALiBi)",
        _make(
            "FalconForCausalLM",
            "FalconConfig",
            vocab_size=VOCAB,
            hidden_size=WIDTH,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            alibi=True,
        ),  # fmt: skip
        "decoder",
    ),
]


def build(arch: Arch, seed: int = 0) -> T.PreTrainedModel:
    """The tiny model, seeded, in eval mode."""
    torch.manual_seed(seed)
    return arch.build().eval()


def verdict(arch: Arch, scorer: str = "ssa") -> tuple[str, str]:
    """(features, outcome) of attaching ``scorer`` to a fresh tiny model: the attention features found
    (name=value, ``;``-separated, over the attention modules) and ``attached`` or ``refused: <why>``."""
    model = build(arch)
    found: dict[str, set] = {}
    for _, m in attention_modules(model):
        for k, v in features(model, m).items():
            found.setdefault(k, set()).add(v)
    text = "; ".join(
        k if all(v is True for v in vs) else f"{k} {', '.join(str(v) for v in sorted(vs, key=str))}"
        for k, vs in found.items()
    )
    try:
        attach(model, scorer=scorer)
    except AttachError as e:
        return text or "—", f"refused: {e}"
    return text or "—", "attached"


def table() -> str:
    """The markdown table of docs/huggingface.md: each architecture, its class, what its attention
    passes, and what ``attach`` does with softmax and with SSA."""
    rows = ["| architecture | class | attention features | `attach` (softmax, ssa) |", "|---|---|---|---|"]
    for arch in ARCHITECTURES:
        feats, soft = verdict(arch, "softmax")
        _, ssa = verdict(arch, "ssa")
        outcome = soft if soft == ssa else f"softmax {soft}; ssa {ssa}"
        outcome = outcome.replace("|", "\\|")
        rows.append(f"| {arch.name} | `{type(build(arch)).__name__}` | {feats} | {outcome} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
