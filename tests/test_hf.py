"""ssa_repro.hf: scorers inside transformers models (tiny random models built from config objects:
GPT-2, Llama and BERT here, and the architecture sweep of ssa_repro/hf/architectures.py; nothing
downloaded). References: the model's own eager attention (softmax), this project's SelfAttention with
the same weights (every scorer), SSA's literal power form in float64 (with soft-caps, sinks and
biases), full forwards for cached generation, central differences for gradients."""

from __future__ import annotations

import logging
from pathlib import Path

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
import ssa_repro.hf.architectures as A  # noqa: E402
from ssa_repro.hf.attach import attention_modules, scorer_config  # noqa: E402
from ssa_repro.hf.attention import SCORER_ATTR  # noqa: E402
from ssa_repro.models.attention import SelfAttention  # noqa: E402
from ssa_repro.scorers import SCORERS  # noqa: E402
from tests.lockdrift import moved  # noqa: E402

VOCAB, C, HEADS = 40, 32, 4


def gpt2(layers=2, **kw):
    kw = {"attn_pdrop": 0.0, **kw}
    cfg = GPT2Config(
        n_embd=C, n_layer=layers, n_head=HEADS, vocab_size=VOCAB, n_positions=16, bos_token_id=0,
        eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, **kw,
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
    # the config attach used: conf/scorer/<name>.yaml (cosformer's m is the model's n_positions)
    ours = SelfAttention(C, HEADS, scorer_config(name, {}, model), causal=True, impl="eager", layer=0)
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


def literal_ssa(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, s_aux=None,
    position_bias=None, **kwargs,
):  # fmt: skip
    """SSA's definition in float64, as an attention function: x = scaling·q·kᵀ, soft-capped c·tanh(x/c),
    plus T5's bias or a float mask's finite part (ALiBi: Falcon); w_ij ∝ (1 + b|x_ij|)^(sgn(x_ij)·n) over the visible keys and, with sinks, one more
    term (1 + b|s_h|)^(sgn(s_h)·n) with value 0 (docs: the sink is a key with logit s_h)."""
    s = getattr(module, SCORER_ATTR)
    q, k, v = (z.double() for z in (query, key, value))
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    x = (q @ k.transpose(-1, -2)) * (scaling if scaling is not None else q.shape[-1] ** -0.5)
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    if position_bias is not None:
        x = x + position_bias.double()
    if attention_mask.dtype != torch.bool:  # additive: ALiBi's bias, the dtype's minimum where hidden
        hidden_ = attention_mask <= torch.finfo(attention_mask.dtype).min / 2
        x = x + attention_mask.double().masked_fill(hidden_, 0.0)
        attention_mask = ~hidden_
    b, n = s.b.double().view(-1, 1, 1), s.n.double().view(-1, 1, 1)
    power = lambda z: (1 + b * z.abs()) ** (torch.sign(z) * n)  # noqa: E731
    w = power(x) * attention_mask  # bool [B, 1, T, S]
    total = w.sum(-1, keepdim=True)
    if s_aux is not None:
        total = total + power(s_aux.double().view(-1, 1, 1))
    w = w / total.clamp_min(1e-300)
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
        ({"scorer": "nope"}, "scorer='nope' is neither a registered scorer .*ssa.* nor a preset .*ssa_n2"),
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


# ---------------------------------------------------------------------------------------------------
# The architecture sweep: tiny random models of the architectures transformers ships
# (ssa_repro/hf/architectures.py). Each is exact with softmax or refused, naming why.


def arch_batch(arch):
    """Model inputs [2, 8] with row 1 right-padded after 5 tokens, and the real positions [2, 8]."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, A.VOCAB, (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    kw = {"input_ids": ids, "attention_mask": mask}
    if arch.kind == "seq2seq":
        kw["decoder_input_ids"] = ids
    return kw, mask.bool()


def logits(model, kw):
    with torch.no_grad():
        return model(**kw).logits


def calls_the_interface(arch) -> bool:
    """Whether the installed transformers' model of ``arch`` sends its attention through the attention
    interface: a counting function registered there and selected, one forward, counted. The oracle the
    sweep's expectations come from, independent of ``attach``'s own detection (a release that moves an
    architecture onto the interface, as 5.25 did for Falcon, moves it from refused to attached here)."""
    calls = []

    def counting(module, q, k, v, mask, **kw):
        calls.append(type(module).__name__)
        return q.transpose(1, 2).new_zeros(q.shape[0], q.shape[2], q.shape[1], v.shape[-1]), None

    AttentionInterface.register("ssa_count_test", counting)
    transformers.masking_utils.AttentionMaskInterface.register(
        "ssa_count_test", transformers.masking_utils.eager_mask
    )
    model = A.build(arch)
    try:
        model.set_attn_implementation("ssa_count_test")
    except (ValueError, KeyError, AttributeError):  # the model takes no attention implementation at all
        return False
    logits(model, arch_batch(arch)[0])
    return bool(calls)


INTERFACE = {a.name: calls_the_interface(a) for a in A.ARCHITECTURES}
ATTACHED = [a for a in A.ARCHITECTURES if INTERFACE[a.name]]
REFUSED = [a for a in A.ARCHITECTURES if not INTERFACE[a.name]]
DECODERS = [a for a in ATTACHED if a.kind == "decoder"]
# what transformers 5.24 refused and 5.25 attaches (Falcon); the literal-formula test takes it when attached
ALIBI = [a for a in ATTACHED if "ALiBi" in a.name]


def test_the_sweep_covers_a_dozen_architectures():
    assert len(A.ARCHITECTURES) >= 12 and len(ATTACHED) >= 12


@pytest.mark.parametrize("arch", A.ARCHITECTURES, ids=lambda a: a.name)
def test_softmax_is_exact_or_refused(arch):
    """attach(softmax) reproduces the model's own eager attention on every real position (padding
    included) where the installed transformers sends the model's attention through the interface
    (``calls_the_interface``), and refuses before changing the model, naming why, where it does not."""
    model = A.build(arch)
    if not INTERFACE[arch.name]:
        before = model.config._attn_implementation
        with pytest.raises(H.AttachError, match="computes its own attention"):
            H.attach(model, scorer="softmax")
        assert model.config._attn_implementation == before
        assert not any(hasattr(m, SCORER_ATTR) for m in model.modules())
        return
    model.set_attn_implementation("eager")
    kw, real = arch_batch(arch)
    ref = logits(model, kw)
    H.attach(model, scorer="softmax")
    assert model.config._attn_implementation == H.ATTN_NAME
    torch.testing.assert_close(logits(model, kw)[real], ref[real], atol=1e-5, rtol=1e-5)


def test_dropout_equals_the_models_own_in_training():
    """Attention dropout (GPT-2's attn_pdrop) in training mode: the same weights dropped as the eager
    function's under the same seed (another seed moves the logits, so the check can fail)."""
    torch.manual_seed(0)
    model = gpt2(attn_pdrop=0.3).train()
    model.set_attn_implementation("eager")
    ids, _ = batch("right")
    torch.manual_seed(5)
    ref = model(input_ids=ids).logits
    torch.manual_seed(6)
    other = model(input_ids=ids).logits
    H.attach(model, scorer="softmax")
    torch.manual_seed(5)
    torch.testing.assert_close(model(input_ids=ids).logits, ref, atol=1e-5, rtol=1e-5)
    assert (other - ref).abs().max() > 1e-2


def drop_kwarg(name):
    """Our attention function with one feature's argument removed: what the plug-in did before."""

    def f(module, q, k, v, mask, **kw):
        kw.pop(name, None)
        return H.attention.scorer_attention(module, q, k, v, mask, **kw)

    return f


@pytest.mark.parametrize(
    ("name", "feature"), [("Gemma2", "softcap"), ("GPT-OSS", "s_aux"), ("T5", "position_bias")]
)
def test_each_feature_changes_the_output(name, feature):
    """The sweep can fail: without the feature (soft-cap, sinks, T5's relative bias) the tiny model's
    logits move by more than 1e-2, so the 1e-5 agreement above is the feature honoured."""
    arch = next(a for a in A.ARCHITECTURES if a.name == name)
    model = H.attach(A.build(arch), scorer="softmax")
    kw, real = arch_batch(arch)
    ref = logits(model, kw)
    AttentionInterface.register("ssa_drop_test", drop_kwarg(feature))
    transformers.masking_utils.AttentionMaskInterface.register("ssa_drop_test", H.attention.scorer_mask)
    model.set_attn_implementation("ssa_drop_test")
    assert (logits(model, kw)[real] - ref[real]).abs().max() > 1e-2


@pytest.mark.parametrize("name", ["Gemma2", "GPT-OSS", "T5", "Mistral", *[a.name for a in ALIBI]])
def test_ssa_with_the_models_features_equals_the_literal_formula(name):
    """SSA after soft-capping (Gemma2, with its query_pre_attn_scalar scaling and windows), with sinks
    (GPT-OSS), with T5's bias, Mistral's window and ALiBi's additive bias (Falcon, where the installed
    transformers sends it through the interface), against the power form in float64."""
    arch = next(a for a in A.ARCHITECTURES if a.name == name)
    model = H.attach(A.build(arch), scorer="ssa")
    perturb(model)
    kw, real = arch_batch(arch)
    out = logits(model, kw)
    AttentionInterface.register("ssa_literal_test", literal_ssa)
    transformers.masking_utils.AttentionMaskInterface.register("ssa_literal_test", H.attention.scorer_mask)
    model.set_attn_implementation("ssa_literal_test")
    torch.testing.assert_close(out[real], logits(model, kw)[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ATTACHED, ids=lambda a: a.name)
def test_ssa_adds_b_and_n_that_receive_gradients(arch):
    model = H.attach(A.build(arch), scorer="ssa")
    kw, _ = arch_batch(arch)
    model(**kw).logits.float().pow(2).mean().backward()
    scorers = [m for m in model.modules() if hasattr(m, "beta") and hasattr(m, "nu")]
    assert len(scorers) == len(attention_modules(model)) >= 2
    for s in scorers:
        for p in (s.beta, s.nu):
            assert p.requires_grad and p.dtype == torch.float32
            assert p.grad is not None and (p.grad != 0).all(), (arch.name, p.grad)


def greedy_without_cache(model, ids, steps, seq2seq=False):
    """Greedy decoding by full forwards: the argmax of each full sequence's last logits."""
    out = ids if not seq2seq else torch.zeros(ids.shape[0], 1, dtype=torch.long)
    with torch.no_grad():
        for _ in range(steps):
            kw = {"input_ids": ids, "decoder_input_ids": out} if seq2seq else {"input_ids": out}
            nxt = model(**kw, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
    return out


@pytest.mark.parametrize(
    "arch", [*DECODERS, *[a for a in ATTACHED if a.kind == "seq2seq"]], ids=lambda a: a.name
)
def test_cached_generation_equals_full_forwards(arch):
    """generate (greedy, KV cache, 4 tokens) equals the argmax path of full forwards, with SSA."""
    model = H.attach(A.build(arch), scorer="ssa")
    perturb(model)
    ids = arch_batch(arch)[0]["input_ids"][:, :6]
    seq2seq = arch.kind == "seq2seq"
    model.generation_config.eos_token_id = None  # 4 tokens whatever they are, as the loop below
    with torch.no_grad():
        got = model.generate(ids, max_new_tokens=4, do_sample=False, use_cache=True)
    want = greedy_without_cache(model, ids, 4, seq2seq)
    assert torch.equal(got, want)


@pytest.mark.parametrize(
    ("name", "scorer", "feature"), [("Gemma2", "cosformer", "softcap"), ("GPT-OSS", "diff", "sinks")]
)
def test_a_scorer_of_q_and_k_is_refused_where_the_model_changes_the_logits(name, scorer, feature):
    arch = next(a for a in A.ARCHITECTURES if a.name == name)
    model = A.build(arch)
    before = model.config._attn_implementation
    with pytest.raises(H.AttachError, match=f"uses {feature}.*scorer={scorer} scores q and k themselves"):
        H.attach(model, scorer=scorer)
    assert model.config._attn_implementation == before


class KeywordAttention(nn.Module):
    """An attention module that passes an argument the plug-in does not know (``indices``)."""

    def __init__(self):
        super().__init__()
        self.num_heads, self.head_dim, self.is_causal = 2, 4, True
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        attention_interface = ALL_ATTENTION_FUNCTIONS["sdpa"]
        q, k, v = self.qkv(x).view(1, -1, 3, 2, 4).permute(2, 0, 3, 1, 4)
        return attention_interface(self, q, k, v, None, scaling=0.5, indices=None)[0]


class KeywordModel(PreTrainedModel):
    config_class = PlainConfig

    def __init__(self, config):
        super().__init__(config)
        self.attn = KeywordAttention()


def test_an_unknown_attention_argument_is_refused_at_attach_and_at_call():
    with pytest.raises(H.AttachError, match="KeywordAttention.* passes indices to its attention function"):
        H.attach(KeywordModel(PlainConfig()), scorer="softmax")
    model = H.attach(gpt2(layers=1), scorer="softmax")
    attn = model.transformer.h[0].attn
    q = torch.randn(1, HEADS, 3, C // HEADS)
    with pytest.raises(TypeError, match="argument\\(s\\) block_indices not understood"):
        H.attention.scorer_attention(attn, q, q, q, None, block_indices=None)
    with pytest.raises(ValueError, match="sliding_window=2 with 3 keys but no mask"):
        H.attention.scorer_attention(attn, q, q, q, None, sliding_window=2)


# ---------------------------------------------------------------------------------------------------
# Values, meta device, attaching twice, presets, dtype


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("b_init", float("inf"), "scorer.b_init=inf must be a finite number"),
        ("n_init", float("nan"), "scorer.n_init=nan must be a finite number"),
        ("b_init", 1e40, "scorer.b_init=1e\\+40 must be"),
    ],
)
def test_non_finite_or_huge_values_are_refused_before_the_model_changes(key, value, message):
    model = gpt2()
    with pytest.raises(H.AttachError, match=message):
        H.attach(model, scorer="ssa", **{key: value})
    assert not any(hasattr(m, SCORER_ATTR) for m in model.modules())
    assert not hasattr(model.config, "ssa_repro_scorer")


@pytest.mark.parametrize("build", [gpt2, llama], ids=["gpt2", "llama"])
def test_meta_device_then_init_weights_gives_the_initial_values(build):
    """Built on the meta device, attached, materialised by to_empty and the model's own init_weights:
    b and n are b_init and n_init (not whatever to_empty left), and the logits equal a model built on
    the CPU with the same weights."""
    with torch.device("meta"):
        model = build()
    H.attach(model, scorer="ssa", b_init=2.0, n_init=3.0)
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    scorers = [m for m in model.modules() if hasattr(m, "beta")]
    assert scorers
    for s in scorers:
        torch.testing.assert_close(s.b, torch.full((HEADS,), 2.0), atol=0, rtol=1e-6)
        torch.testing.assert_close(s.n, torch.full((HEADS,), 3.0), atol=0, rtol=1e-6)
    ref = H.attach(build(), scorer="ssa", b_init=2.0, n_init=3.0)
    ref.load_state_dict(model.state_dict())
    ids, mask = batch("right")
    with torch.no_grad():
        torch.testing.assert_close(
            model(input_ids=ids, attention_mask=mask).logits, ref(input_ids=ids, attention_mask=mask).logits
        )


def test_attaching_twice_is_refused_and_replace_resets():
    model = H.attach(gpt2(), scorer="ssa")
    perturb(model)
    s = model.transformer.h[0].attn.ssa_scorer
    trained = s.beta.detach().clone()
    with pytest.raises(
        H.AttachError, match="already has scorers .*ssa.*reset their trained values.*replace=True"
    ):
        H.attach(model, scorer="ssa")
    assert torch.equal(model.transformer.h[0].attn.ssa_scorer.beta, trained)
    H.attach(model, scorer="softmax_sink", replace=True)
    assert model.config.ssa_repro_scorer["name"] == "softmax_sink"
    assert torch.equal(model.transformer.h[0].attn.ssa_scorer.s, torch.zeros(HEADS))


def test_presets_of_conf_scorer_are_accepted():
    """A preset is its YAML over its schema: ssa_n2 is n fixed at 2 (a buffer) with label ssa_n2;
    cosformer's ${model.max_positions} is the model's; every preset either attaches or is refused
    naming why (gated: the attention output)."""
    from omegaconf import OmegaConf as OC

    model = H.attach(gpt2(), scorer="ssa_n2")
    s = model.transformer.h[0].attn.ssa_scorer
    assert model.config.ssa_repro_scorer["label"] == "ssa_n2"
    assert "nu" in dict(s.named_buffers()) and torch.allclose(s.n, torch.full((HEADS,), 2.0))
    model = H.attach(gpt2(), scorer="cosformer")
    assert model.config.ssa_repro_scorer["m"] == 16  # gpt2()'s n_positions
    refused = set()
    for name, path in H.presets().items():
        raw = OC.to_container(OC.load(path))
        try:
            model = H.attach(gpt2(), scorer=name)
        except H.AttachError as e:
            assert "acts on the attention output" in str(e), (name, e)
            refused.add(name)
            continue
        saved = model.config.ssa_repro_scorer
        assert saved["label"] == raw.get("label", saved["name"]), name
        for k, v in raw.items():
            if k not in ("defaults", "label") and "${" not in str(v):
                assert saved[k] == v, (name, k)
    assert refused == {"gated"}  # the one scorer that acts on the attention output


def test_scorer_parameters_stay_float32_in_a_bf16_model():
    """The dtype policy: float32 b and n in a bf16 model (b_init=1.1 is kept exactly; bf16 would round
    it to 1.1015625), and the bf16 model's logits stay as close to the float32 model's as with
    softmax."""
    torch.manual_seed(0)
    ref = H.attach(gpt2(), scorer="ssa", b_init=1.1)
    model = H.attach(gpt2().to(torch.bfloat16), scorer="ssa", b_init=1.1)
    model.load_state_dict(ref.state_dict())
    s = model.transformer.h[0].attn.ssa_scorer
    assert s.beta.dtype == torch.float32 and s.b[0].item() == pytest.approx(1.1, abs=1e-6)
    ids, mask = batch("right")
    with torch.no_grad():
        diff = (model(input_ids=ids).logits.float() - ref(input_ids=ids).logits).abs().max()
        soft = H.attach(gpt2(), scorer="softmax")
        soft_bf16 = H.attach(gpt2().to(torch.bfloat16), scorer="softmax")
        soft_bf16.load_state_dict(soft.state_dict())
        soft_diff = (soft_bf16(input_ids=ids).logits.float() - soft(input_ids=ids).logits).abs().max()
    assert diff < 3 * soft_diff, (float(diff), float(soft_diff))


# ---------------------------------------------------------------------------------------------------
# The HF workflow: reload, Trainer, the docs' table


class Captured(logging.Handler):
    def __init__(self):
        super().__init__()
        self.text = []

    def emit(self, record):
        self.text.append(record.getMessage())


@pytest.fixture
def transformers_log():
    handler = Captured()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def test_reload_is_quiet_and_plain_from_pretrained_warns(tmp_path, transformers_log):
    model = H.attach(gpt2(), scorer="ssa_n2")
    model.save_pretrained(tmp_path)
    back = H.load_pretrained(GPT2LMHeadModel, tmp_path)
    assert back.config.ssa_repro_scorer["label"] == "ssa_n2"
    assert not any("UNEXPECTED" in t for t in transformers_log.text), transformers_log.text
    with pytest.warns(UserWarning, match="scorer ssa_n2.*ssa_repro.hf.load_pretrained"):
        plain = GPT2LMHeadModel.from_pretrained(tmp_path)
    assert not any(hasattr(m, SCORER_ATTR) for m in plain.modules())
    # a report with more to say than the scorer tensors is still shown
    transformers_log.text.clear()
    H.load_pretrained(GPT2LMHeadModel, tmp_path, n_layer=3)
    assert any("MISSING" in t for t in transformers_log.text)


def test_a_five_step_trainer_run_trains_b_and_n(tmp_path):
    """transformers' Trainer (accelerate) on a tiny GPT-2 with SSA: 5 steps, one logged loss per step,
    the first equal to the model's own loss on that batch (every example is the same), b and n moved."""
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(0)
    model = H.attach(gpt2(), scorer="ssa").train()
    ids = torch.randint(1, VOCAB, (8,))
    # the first label is never a target (labels shift by one); -100 there makes the Trainer's count of
    # targets (num_items_in_batch, taken before the shift) the model's own
    labels = ids.clone()
    labels[0] = -100
    data = [{"input_ids": ids, "labels": labels}] * 16
    with torch.no_grad():
        first = model(input_ids=ids[None].repeat(4, 1), labels=labels[None].repeat(4, 1)).loss.item()
    s = model.transformer.h[0].attn.ssa_scorer
    b0, n0 = s.b.detach().clone(), s.n.detach().clone()
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=5, per_device_train_batch_size=4, learning_rate=1e-2,
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    assert len(losses) == 5
    assert losses[0] == pytest.approx(first, rel=1e-4)
    assert not torch.allclose(s.b, b0) and not torch.allclose(s.n, n0)


def test_the_docs_table_is_the_generated_one():
    """docs/huggingface.md holds exactly ``python -m ssa_repro.hf.architectures``'s table."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "huggingface.md").read_text()
    assert A.table() in page, (
        f"docs/huggingface.md's table is not what transformers {transformers.__version__} does "
        f"(regenerate it: python -m ssa_repro.hf.architectures); {moved(['transformers', 'torch'])}"
    )


# ----------------------------------------------------------------------------- the fused SSA kernel
needs_triton = pytest.mark.skipif(
    not __import__("importlib").util.find_spec("triton"), reason="the kernels extra is not installed"
)


def kernel_calls(monkeypatch) -> list:
    """Count the calls of the fused kernel that the HF attention function makes (and run them)."""
    calls = []
    real = H.attention.ssa_attention

    def counted(*args, **kw):
        calls.append(kw)
        return real(*args, **kw)

    monkeypatch.setattr(H.attention, "ssa_attention", counted)
    return calls


def triton_and_plain(build, padding, monkeypatch):
    """A model with SSA attached through attn_impl='triton' and the same model through 'plain' (same
    weights, perturbed b and n): their last hidden states and the gradients of every b and n (β, ν) for
    one loss, under the Triton interpreter."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    calls = kernel_calls(monkeypatch)
    torch.manual_seed(0)
    base = build()
    out = {}
    for impl in ("triton", "plain"):
        model = H.attach(__import__("copy").deepcopy(base), scorer="ssa", attn_impl=impl)
        perturb(model)
        ids, mask = batch(padding)
        h = hidden(model, ids, mask)
        real = mask.bool()
        (h[real] ** 2).sum().backward()  # rows with no visible key are 0 on both paths: left out
        scorers = [getattr(m, SCORER_ATTR) for _, m in attention_modules(model)]
        out[impl] = (h[real].detach(), [p.grad for s in scorers for p in (s.beta, s.nu)])
    return out, calls


@needs_triton
@pytest.mark.parametrize(("build", "padding"), [(gpt2, "right"), (llama, "left")], ids=["gpt2", "llama"])
def test_triton_kernel_equals_the_plain_path(build, padding, monkeypatch):
    """GPT-2 (right padding, causal + key padding) and Llama (RoPE, 4 query heads over 2 k/v heads, left
    padding): attn_impl='triton' runs the kernel in every layer and gives the plain path's output and
    gradients of b and n (interpreter, float32)."""
    out, calls = triton_and_plain(build, padding, monkeypatch)
    assert len(calls) == 2  # both layers, once each (the plain model never calls it)
    assert all(c["causal"] and c["key_padding_mask"] is not None for c in calls)
    torch.testing.assert_close(out["triton"][0], out["plain"][0], atol=2e-5, rtol=1e-5)
    for g, r in zip(out["triton"][1], out["plain"][1], strict=True):
        assert r is not None and (r != 0).all()
        torch.testing.assert_close(g, r, atol=2e-5, rtol=1e-4)


@needs_triton
def test_triton_bidirectional_kernel_equals_the_plain_path(monkeypatch):
    """BERT: a key-padding mask without the causal one reaches the kernel as such."""
    out, calls = triton_and_plain(bert, "right", monkeypatch)
    assert len(calls) == 2 and not any(c["causal"] for c in calls)
    torch.testing.assert_close(out["triton"][0], out["plain"][0], atol=2e-5, rtol=1e-5)
    for g, r in zip(out["triton"][1], out["plain"][1], strict=True):
        torch.testing.assert_close(g, r, atol=2e-5, rtol=1e-4)


def test_kernel_mask_reads_causal_and_key_padding_back():
    """The boolean masks transformers builds map to (causal, key padding) exactly, or to None."""
    t = 6
    tril = torch.ones(t, t, dtype=torch.bool).tril()
    pad = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]], dtype=torch.bool)  # left padding
    causal = (tril & pad[:, None, :])[:, None]  # [B, 1, T, T]
    c, kpm = H.attention.kernel_mask(causal, 2, t)
    assert c and torch.equal(kpm, pad)
    c, kpm = H.attention.kernel_mask(pad[:, None, None, :].expand(2, 1, t, t), 2, t)
    assert not c and torch.equal(kpm, pad)
    assert H.attention.kernel_mask(tril, 2, t) == (True, None)  # no padding: no key-padding mask
    assert H.attention.kernel_mask(None, 2, t) == (False, None)
    window = tril & ~torch.ones(t, t, dtype=torch.bool).tril(-3)  # a sliding window of 3
    assert H.attention.kernel_mask(window, 2, t) is None
    assert H.attention.kernel_mask(tril[None, None].expand(2, 4, t, t), 2, t) is None  # per-head masks


@needs_triton
def test_triton_leaves_cached_decoding_to_the_plain_path(monkeypatch):
    """A decoding step (1 query, S keys) is no kernel call: it takes the plain path and still equals the
    full forward; the prompt's forward is a kernel call."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    calls = kernel_calls(monkeypatch)
    torch.manual_seed(0)
    model = H.attach(gpt2(), scorer="ssa", attn_impl="triton")
    perturb(model)
    ids, _ = batch("right")
    with torch.no_grad():
        full = model(input_ids=ids).logits
        first = model(input_ids=ids[:, :5], use_cache=True)
        n = len(calls)
        step = model(input_ids=ids[:, 5:6], cache=first.past_key_values, use_cache=True).logits
    assert n == 4 and len(calls) == n  # the two forwards above, 2 layers each; the step: none
    torch.testing.assert_close(step[:, 0], full[:, 5], atol=1e-5, rtol=0)


def test_auto_follows_auto_triton_and_plain_never_calls(monkeypatch):
    """'auto' takes the kernel only where AUTO_TRITON is on and the kernel runs on the GPU (here on the
    CPU: the plain path); 'plain' never calls it. Then as on a GPU (``kernel_on_gpu`` made true, a
    stand-in kernel): AUTO_TRITON off, no call; on, each layer's."""
    from ssa_repro.models import attention as model_attention

    calls = kernel_calls(monkeypatch)
    ids, mask = batch("right")
    for impl in ("auto", "plain"):
        model = H.attach(gpt2(), scorer="ssa", attn_impl=impl)
        with torch.no_grad():
            hidden(model, ids, mask)
    assert calls == []
    monkeypatch.setattr(model_attention, "kernel_on_gpu", lambda q: True)
    monkeypatch.setattr(H.attention, "ssa_attention", lambda q, *a, **kw: calls.append(kw) or q * 0)
    monkeypatch.setattr(model_attention, "AUTO_TRITON", False)
    model = H.attach(gpt2(), scorer="ssa", attn_impl="auto")
    with torch.no_grad():
        hidden(model, ids, mask)
    assert calls == []
    monkeypatch.setattr(model_attention, "AUTO_TRITON", True)
    with torch.no_grad():
        hidden(model, ids, mask)
    assert len(calls) == 2  # a stand-in for the kernel (no GPU here): each layer reached it


@pytest.mark.parametrize(
    ("scorer", "impl", "message"),
    [
        ("ssa", "fused", "attn_impl='fused'; allowed: auto, plain, triton"),
        ("softmax", "triton", "scorer=softmax is not SSA (allowed: ssa"),
    ],
)
def test_bad_attn_impl_is_refused(scorer, impl, message):
    model = gpt2()
    with pytest.raises(H.AttachError, match=__import__("re").escape(message)):
        H.attach(model, scorer=scorer, attn_impl=impl)
    assert not hasattr(model.transformer.h[0].attn, SCORER_ATTR)  # nothing changed


def test_triton_refuses_a_model_the_kernel_cannot_compute():
    """Gemma2's soft-capping: every call would leave the kernel, so attach refuses, naming it."""
    model = A.build(next(a for a in A.ARCHITECTURES if a.name == "Gemma2"))
    with pytest.raises(H.AttachError, match="uses softcap, .*which the kernel does not compute"):
        H.attach(model, scorer="ssa", attn_impl="triton")
