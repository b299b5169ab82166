"""ssa_repro.hf: scorers inside transformers models (tiny random GPT-2, Llama and BERT configs built
from config objects; nothing downloaded). References: the model's own eager attention (softmax), this
project's SelfAttention with the same weights (every scorer), and SSA's literal power form in float64."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

transformers = pytest.importorskip("transformers", reason="the hf extra: pip install -e '.[hf]'")

from torch import nn  # noqa: E402
from transformers import (  # noqa: E402
    AttentionInterface,
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
)

import ssa_repro.hf as H  # noqa: E402
from ssa_repro.hf.attention import SCORER_ATTR  # noqa: E402
from ssa_repro.models.attention import SelfAttention  # noqa: E402
from ssa_repro.scorers import SCORERS  # noqa: E402

VOCAB, C, HEADS = 40, 32, 4


def gpt2(layers=2, **kw):
    cfg = GPT2Config(
        n_embd=C, n_layer=layers, n_head=HEADS, vocab_size=VOCAB, n_positions=16, bos_token_id=0,
        eos_token_id=0, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0, **kw,
    )  # fmt: skip
    return GPT2LMHeadModel(cfg).eval()


def llama():
    cfg = LlamaConfig(
        hidden_size=C, intermediate_size=64, num_hidden_layers=2, num_attention_heads=HEADS,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=16, bos_token_id=0,
        eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


def bert(layers=2):
    cfg = BertConfig(
        hidden_size=C, num_hidden_layers=layers, num_attention_heads=HEADS, intermediate_size=64,
        vocab_size=VOCAB, max_position_embeddings=16, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, pad_token_id=0,
    )  # fmt: skip
    return BertModel(cfg).eval()


BUILD = {
    "gpt2": gpt2,
    "gpt2_layer_scaled": lambda: gpt2(scale_attn_by_inverse_layer_idx=True),  # scaling 1/(√d·(layer+1))
    "llama": llama,
    "bert": bert,
}


def batch(padding: str):
    """ids [2, 8] and the 2-D attention mask: row 1 has 3 padding positions (right or left)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0 if padding == "right" else 1
    if padding == "left":
        mask[1, :3] = 0
    return ids, mask


def hidden(model, ids, mask):
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    return out.hidden_states[-1]  # [B, T, C]


def perturb(model, seed=0):
    """Per-head b and n away from their initial values, so that a head mix-up shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            s = getattr(m, SCORER_ATTR, None)
            if s is not None:
                for p in (s.beta, s.nu):
                    p.add_(torch.randn(p.shape, generator=g) * 0.5)


@pytest.mark.parametrize(
    ("arch", "padding"),
    [("gpt2", "right"), ("gpt2_layer_scaled", "right"), ("llama", "left"), ("bert", "right")],
)
def test_softmax_equals_the_models_own_attention(arch, padding):
    torch.manual_seed(0)
    model = BUILD[arch]()
    model.set_attn_implementation("eager")
    ids, mask = batch(padding)
    with torch.no_grad():
        ref = hidden(model, ids, mask)
        H.attach(model, scorer="softmax")
        assert model.config._attn_implementation == H.ATTN_NAME
        out = hidden(model, ids, mask)
    real = mask.bool()  # left padding: positions with no visible key differ (eager: uniform; here: 0)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[real], ref[real], atol=1e-5, rtol=0)


def test_padding_is_honoured():
    """A right-padded row's real positions equal the same sequence alone (causal and bidirectional)."""
    ids, mask = batch("right")
    for build in (gpt2, bert):
        torch.manual_seed(0)
        model = H.attach(build(), scorer="ssa")
        perturb(model)
        with torch.no_grad():
            padded = hidden(model, ids, mask)[1, :5]
            alone = hidden(model, ids[1:, :5], mask[1:, :5])[0]
        torch.testing.assert_close(padded, alone, atol=1e-5, rtol=0)


def scorer_cfg(name):
    return OmegaConf.merge(OmegaConf.structured(SCORERS.schemas[name]), {})


def attention_io(module, model, *args, **kw):
    """(input hidden states, output) of one attention module during a forward pass of ``model``."""
    seen = {}

    def hook(mod, inputs, kwargs, output):
        seen["x"] = kwargs.get("hidden_states", inputs[0] if inputs else None)
        seen["y"] = output[0]

    handle = module.register_forward_hook(hook, with_kwargs=True)
    try:
        model(*args, **kw)
    finally:
        handle.remove()
    return seen["x"], seen["y"]


@pytest.mark.parametrize("name", [n for n in SCORERS.names() if not SCORERS.get(n).output_params])
def test_gpt2_attention_equals_selfattention(name):
    """Every scorer: GPT-2's attention with the scorer attached equals SelfAttention (plain path) with
    GPT-2's c_attn / c_proj copied in (Conv1D stores Wᵀ) and the same scorer state."""
    torch.manual_seed(0)
    model = gpt2(layers=1)
    H.attach(model, scorer=name)
    attn = model.transformer.h[0].attn
    ours = SelfAttention(C, HEADS, scorer_cfg(name), causal=True, impl="eager", layer=0)
    with torch.no_grad():
        ours.qkv.weight.copy_(attn.c_attn.weight.T)
        ours.qkv.bias.copy_(attn.c_attn.bias)
        ours.proj.weight.copy_(attn.c_proj.weight.T)
        ours.proj.bias.copy_(attn.c_proj.bias)
        for p in ours.scorer.parameters():  # away from the initial values where there are any
            p.add_(torch.randn(p.shape) * 0.3)
        getattr(attn, SCORER_ATTR).load_state_dict(ours.scorer.state_dict())
        ids, mask = batch("right")
        x, y = attention_io(attn, model, input_ids=ids[:1], attention_mask=mask[:1])
        ref, _ = ours(x)
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)


def test_bert_ssa_equals_bidirectional_selfattention():
    torch.manual_seed(0)
    model = H.attach(bert(layers=1), scorer="ssa")
    perturb(model)
    attn = model.encoder.layer[0].attention.self
    ours = SelfAttention(C, HEADS, scorer_cfg("ssa"), causal=False, impl="eager")
    with torch.no_grad():
        ours.qkv.weight.copy_(torch.cat([attn.query.weight, attn.key.weight, attn.value.weight]))
        ours.qkv.bias.copy_(torch.cat([attn.query.bias, attn.key.bias, attn.value.bias]))
        ours.proj.weight.copy_(torch.eye(C))  # BertSelfAttention ends before its output projection
        ours.proj.bias.zero_()
        ours.scorer.load_state_dict(getattr(attn, SCORER_ATTR).state_dict())
        ids, _ = batch("right")
        x, y = attention_io(attn, model, input_ids=ids)
        ref, _ = ours(x)
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)


def literal_ssa(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """SSA's definition, w_ij ∝ (1 + b|x_ij|)^(sgn(x_ij)·n), in float64, as an attention function."""
    s = getattr(module, SCORER_ATTR)
    q, k, v = (z.double() for z in (query, key, value))
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    x = (q @ k.transpose(-1, -2)) * scaling
    b, n = s.b.double().view(-1, 1, 1), s.n.double().view(-1, 1, 1)
    w = (1 + b * x.abs()) ** (torch.sign(x) * n)
    w = w * attention_mask  # bool [B, 1, T, S]
    w = w / w.sum(-1, keepdim=True).clamp_min(1e-300)
    return (w @ v).to(query.dtype).transpose(1, 2), None


def test_llama_ssa_equals_the_literal_formula():
    """Llama (RoPE, grouped-query attention, left padding) against SSA's power form in float64."""
    torch.manual_seed(0)
    model = H.attach(llama(), scorer="ssa")
    perturb(model)
    ids, mask = batch("left")
    with torch.no_grad():
        out = hidden(model, ids, mask)
        AttentionInterface.register("ssa_literal_test", literal_ssa)
        # the same boolean masks as ours (the mask function is looked up under the model's name)
        transformers.masking_utils.AttentionMaskInterface.register(
            "ssa_literal_test", H.attention.scorer_mask
        )
        model.set_attn_implementation("ssa_literal_test")
        ref = hidden(model, ids, mask)
    real = mask.bool()
    torch.testing.assert_close(out[real], ref[real], atol=1e-5, rtol=1e-5)


def test_gradients_reach_b_and_n():
    """Autograd's d loss / d β and d ν (every head) equal central differences, in float64."""
    torch.manual_seed(0)
    model = H.attach(gpt2().double(), scorer="ssa")
    perturb(model)
    ids, mask = batch("right")
    s = getattr(model.transformer.h[1].attn, SCORER_ATTR)

    def loss():  # cross-entropy in float64 (transformers' own loss casts the logits to float32)
        logits = model(input_ids=ids, attention_mask=mask).logits
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))

    loss().backward()
    for p in (s.beta, s.nu):
        assert p.dtype == torch.float32  # the scorer's own parameters; the maths upcasts
        assert p.grad is not None and (p.grad != 0).all()
    s.double()
    model.zero_grad()
    loss().backward()
    eps = 1e-6
    for p in (s.beta, s.nu):
        for h in range(HEADS):
            with torch.no_grad():
                p[h] += eps
                up = loss().item()
                p[h] -= 2 * eps
                down = loss().item()
                p[h] += eps
            assert p.grad[h].item() == pytest.approx((up - down) / (2 * eps), rel=1e-5, abs=1e-9)


def test_save_pretrained_and_load_keep_the_scorer(tmp_path):
    torch.manual_seed(0)
    model = H.attach(gpt2(), scorer="ssa", per_head=True, n_init=2.0)
    perturb(model)
    ids, mask = batch("right")
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask).logits
    model.save_pretrained(tmp_path)
    back = H.load_pretrained(GPT2LMHeadModel, tmp_path).eval()
    assert back.config._attn_implementation == H.ATTN_NAME
    assert back.config.ssa_repro_scorer["n_init"] == 2.0
    for a, b in zip(model.transformer.h, back.transformer.h):
        sa, sb = getattr(a.attn, SCORER_ATTR), getattr(b.attn, SCORER_ATTR)
        assert torch.equal(sa.beta, sb.beta) and torch.equal(sa.nu, sb.nu)
    with torch.no_grad():
        torch.testing.assert_close(back(input_ids=ids, attention_mask=mask).logits, ref, atol=0, rtol=0)
    with pytest.raises(H.AttachError, match="ssa_repro_scorer"):
        gpt2().save_pretrained(tmp_path / "plain")
        H.load_pretrained(GPT2LMHeadModel, tmp_path / "plain")


def test_causal_only_scorer_is_refused_for_a_bidirectional_model():
    model = bert()
    before = model.config._attn_implementation
    with pytest.raises(H.AttachError, match="causal only.*attends both ways.*softmax"):
        H.attach(model, scorer="stickbreaking")
    assert model.config._attn_implementation == before
    assert not any(hasattr(m, SCORER_ATTR) for m in model.modules())  # nothing changed
    H.attach(gpt2(), scorer="stickbreaking")  # causal: allowed


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"scorer": "nope"}, "scorer='nope' is not registered; allowed: .*ssa"),
        ({"scorer": "ssa", "b0": 1.0}, "unknown key.*b0; allowed: .*b_init"),
        ({"scorer": "ssa", "b_init": -1.0}, "b_init=-1.0 must be > 0"),
    ],
)
def test_bad_scorer_keys_are_refused(keys, message):
    with pytest.raises(H.AttachError, match=message):
        H.attach(gpt2(), **keys)


class PlainConfig(PretrainedConfig):
    model_type = "ssa_repro_plain_test"


class PlainModel(PreTrainedModel):
    """A transformers model whose attention (nn.MultiheadAttention) does not use the interface."""

    config_class = PlainConfig

    def __init__(self, config):
        super().__init__(config)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x)[0]


def test_a_model_whose_attention_cannot_be_replaced_is_refused():
    with pytest.raises(H.AttachError, match="cannot be replaced"):
        H.attach(PlainModel(PlainConfig()), scorer="ssa")
    with pytest.raises(H.AttachError, match="not a transformers PreTrainedModel"):
        H.attach(nn.Linear(2, 2), scorer="ssa")


def test_cached_decoding_equals_the_full_forward():
    """Generation with a KV cache (one query against S keys: the mask's offset) gives the logits of the
    full sequence, and greedy generation is the same with and without the cache."""
    torch.manual_seed(0)
    model = H.attach(gpt2(), scorer="ssa")
    perturb(model)
    ids, _ = batch("right")
    with torch.no_grad():
        full = model(input_ids=ids).logits
        first = model(input_ids=ids[:, :5], use_cache=True)
        step = model(input_ids=ids[:, 5:6], cache=first.past_key_values, use_cache=True).logits
        torch.testing.assert_close(step[:, 0], full[:, 5], atol=1e-5, rtol=0)
        a = model.generate(ids, max_new_tokens=4, do_sample=False)
        b = model.generate(ids, max_new_tokens=4, do_sample=False, use_cache=False)
    assert torch.equal(a, b)


def test_a_scorer_acting_on_the_output_is_refused():
    """gated's gate reads the layer input, which the attention interface does not pass: refused, naming it."""
    model = transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=11))
    with pytest.raises(H.AttachError, match="scorer=gated acts on the attention output"):
        H.attach(model, scorer="gated")
