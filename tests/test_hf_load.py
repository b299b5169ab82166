"""ssa_repro.hf.load_pretrained never falls back to initial scorer values silently (issue 61, class 2):
a save holding a layer's weights but not its trained scorer tensors is refused naming them, unless the
caller asks for initial values (``missing_scorer="initial"``); a layer the save lacks entirely keeps
the documented behaviour (initial values, a warning)."""

from __future__ import annotations

import json
import logging

import pytest
import torch

pytest.importorskip("transformers", reason="the hf extra: pip install -e '.[hf]'")

from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

import ssa_repro.hf as H  # noqa: E402
from ssa_repro.hf.attention import SCORER_ATTR  # noqa: E402


def gpt2(layers=2):
    cfg = GPT2Config(n_embd=16, n_layer=layers, n_head=2, vocab_size=11, n_positions=16, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg).eval()


@pytest.fixture
def saved(tmp_path):
    """An SSA model with b and n moved away from their initial values, saved."""
    torch.manual_seed(0)
    model = H.attach(gpt2(), scorer="ssa", per_head=True)
    with torch.no_grad():
        for m in model.modules():
            s = getattr(m, SCORER_ATTR, None)
            if s is not None:
                s.beta.add_(0.7)
                s.nu.add_(-0.4)
    model.save_pretrained(tmp_path, safe_serialization=True)
    return model, tmp_path


def drop(path, predicate):
    """Rewrite ``path``/model.safetensors without the tensors whose name ``predicate`` accepts."""
    file = path / "model.safetensors"
    with safe_open(str(file), "pt") as f:
        keep = {k: f.get_tensor(k) for k in f.keys() if not predicate(k)}  # noqa: SIM118
    save_file(keep, str(file), metadata={"format": "pt"})


def scorer(model, layer):
    return getattr(model.transformer.h[layer].attn, SCORER_ATTR)


def test_a_save_without_its_scorer_tensors_is_refused_naming_them(saved):
    """The issue's instance: every layer's own weights there, every scorer tensor gone."""
    _, path = saved
    drop(path, lambda k: f".{SCORER_ATTR}." in k)
    with pytest.raises(H.AttachError) as e:
        H.load_pretrained(GPT2LMHeadModel, path)
    text = str(e.value)
    assert (
        f"transformer.h.0.attn.{SCORER_ATTR}.beta" in text
        and f"transformer.h.1.attn.{SCORER_ATTR}.nu" in text
    )
    assert "missing_scorer='initial'" in text and str(path) in text


def test_initial_values_are_given_only_when_asked(saved, caplog):
    model, path = saved
    drop(path, lambda k: f".{SCORER_ATTR}." in k)
    with caplog.at_level(logging.WARNING):
        back = H.load_pretrained(GPT2LMHeadModel, path, missing_scorer="initial")
    fresh = H.attach(gpt2(), scorer="ssa", per_head=True)
    assert torch.equal(scorer(back, 0).beta, scorer(fresh, 0).beta)  # the initial b, as asked
    assert not torch.equal(scorer(back, 0).beta, scorer(model, 0).beta)
    assert "keep their initial values (missing_scorer='initial')" in caplog.text


def test_one_lost_tensor_of_one_layer_is_refused(saved):
    """Another instance: only layer 1's n lost (a partial copy or an edit), every b there."""
    _, path = saved
    gone = f"transformer.h.1.attn.{SCORER_ATTR}.nu"
    drop(path, lambda k: k == gone)
    with pytest.raises(H.AttachError, match="not their trained scorer tensors") as e:
        H.load_pretrained(GPT2LMHeadModel, path)
    assert gone in str(e.value) and f"h.0.attn.{SCORER_ATTR}" not in str(e.value)


def test_a_sharded_save_whose_index_lost_the_scorer_is_refused(tmp_path):
    """Another instance: a save in shards (model.safetensors.index.json) whose index lost the rows."""
    model = H.attach(gpt2(), scorer="ssa")
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    index = tmp_path / "model.safetensors.index.json"
    info = json.loads(index.read_text())
    info["weight_map"] = {k: v for k, v in info["weight_map"].items() if f".{SCORER_ATTR}." not in k}
    index.write_text(json.dumps(info))
    with pytest.raises(H.AttachError, match=f"transformer.h.0.attn.{SCORER_ATTR}"):
        H.load_pretrained(GPT2LMHeadModel, tmp_path)


def test_a_layer_the_save_lacks_entirely_keeps_the_documented_initial_values(saved, caplog):
    model, path = saved
    with caplog.at_level(logging.WARNING):
        back = H.load_pretrained(GPT2LMHeadModel, path, n_layer=3)
    assert torch.equal(scorer(back, 1).nu, scorer(model, 1).nu)  # the saved layers: saved values
    assert f"h.2.attn.{SCORER_ATTR}" in caplog.text and "layers the save lacks entirely" in caplog.text


def test_an_unknown_choice_is_refused_naming_the_key(saved):
    with pytest.raises(H.AttachError, match="missing_scorer='maybe': allowed: 'refuse', 'initial'"):
        H.load_pretrained(GPT2LMHeadModel, saved[1], missing_scorer="maybe")
