"""Zorro scoring: file pairing, accuracy, the pseudo-log-likelihood and holistic scores against a direct
computation on a tiny encoder, and the table-3 layout across runs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from ssa_repro.cli import commands  # scripts/zorro_table.py and ssa-zorro-table: commands.zorro_table
from ssa_repro.data import childes
from ssa_repro.evaluation import zorro
from ssa_repro.evaluation.store import Store
from ssa_repro.models import build_model
from ssa_repro.reports import zorro_table
from tests.conftest import make_cfg


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_reader_pairs_odd_ungrammatical_with_even_grammatical(tmp_path):
    f = _write(tmp_path / "p.txt", ["bad one .", "good one .", "bad two .", "good two ."])
    assert zorro.read_pairs(f) == [("bad one .", "good one ."), ("bad two .", "good two .")]
    assert zorro.read_pairs(f, 1) == [("bad one .", "good one .")]
    with pytest.raises(ValueError, match="even number"):
        zorro.read_pairs(_write(tmp_path / "odd.txt", ["a .", "b .", "c ."]))


def _fake_dir(tmp_path, n_pairs=5):
    z = tmp_path / "zorro"
    z.mkdir()
    for stem in ("binding-principle_a", "ellipsis-n_bar"):
        _write(z / f"{stem}.txt", [s for i in range(n_pairs) for s in (f"bad {i} .", f"good {i} .")])
    _write(
        z / "names.tsv",
        ["paper_name\tfile_stem\tcertainty", "binding-principle_a\tbinding-principle_a\tcertain"],
    )
    return z


class _Tok:
    def encode_batch(self, texts, add_special_tokens=False):
        class E:
            def __init__(self, t):
                self.ids = [5 + len(w) for w in t.split()]

        return [E(t) for t in texts]


@pytest.mark.parametrize("prefers, expected", [("even", 100.0), ("odd", 0.0), ("tie", 0.0)])
def test_accuracy_of_a_model_that_prefers_even_lines(tmp_path, monkeypatch, prefers, expected):
    z = _fake_dir(tmp_path)

    def fake(model, seqs, device, max_elements=0):  # sequences come as ungrammatical, grammatical, ...
        parity = np.arange(len(seqs)) % 2
        return {"even": parity, "odd": 1 - parity, "tie": np.zeros(len(seqs))}[prefers].astype(float)

    monkeypatch.setitem(zorro.SCORERS, "fake", fake)
    results, pairs = zorro.evaluate_zorro(
        torch.nn.Identity(), _Tok(), z, "cpu", methods=["fake"], base={"scorer": "x"}
    )
    per = results[~results.paradigm.str.startswith("mean")]
    assert per.value.tolist() == [expected, expected] and per.n_samples.tolist() == [5, 5]
    assert per.se.tolist() == [0.0, 0.0]
    assert per.set_index("paradigm").reported.to_dict() == {
        "binding-principle_a": True,
        "ellipsis-n_bar": False,
    }
    assert len(pairs) == 10 and pairs.grammatical.str.startswith("good").all()
    means = results[results.paradigm.str.startswith("mean")]
    assert set(means.paradigm) == {"mean (2)", "mean (paper 1)"} and (means.value == expected).all()
    assert zorro.headline(results) == {"zorro_fake_mean_all": expected, "zorro_fake_mean_paper12": expected}


def test_binomial_standard_error_and_wilson_interval():
    b = zorro.binomial(150, 200)
    assert b["value"] == 75.0 and math.isclose(b["se"], 100 * math.sqrt(0.75 * 0.25 / 200))
    # the Wilson score interval, written out: (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    p, n, z = 0.75, 200, 1.959963984540054
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo, hi = 100 * (centre - half) / (1 + z * z / n), 100 * (centre + half) / (1 + z * z / n)
    assert math.isclose(b["ci_low"], lo, rel_tol=1e-9) and math.isclose(b["ci_high"], hi, rel_tol=1e-9)
    edge = zorro.binomial(200, 200)
    assert edge["ci_high"] == 100.0 and edge["ci_low"] < 100.0


@pytest.fixture(scope="module")
def tiny_encoder():
    cfg = make_cfg("task=mlm", "model=encoder", "model.vocab_size=40", "model.n_layer=2", "model.n_embd=16")
    torch.manual_seed(0)
    return build_model(cfg.model, cfg.scorer).eval()


def _seqs():
    g = torch.Generator().manual_seed(3)
    lengths = [3, 5, 5, 7, 2, 5, 4]
    return [
        [childes.BOS, *torch.randint(5, 40, (n - 2,), generator=g).tolist(), childes.EOS] for n in lengths
    ]


def test_pseudo_log_likelihood_equals_a_direct_computation(tiny_encoder):
    seqs = _seqs()
    got = zorro.pll_scores(tiny_encoder, seqs, "cpu", max_elements=200)  # forces several chunks
    for s, score in zip(seqs, got, strict=True):
        direct = 0.0
        for p in range(1, len(s) - 1):
            x = torch.tensor([s])
            x[0, p] = childes.MASK
            direct += tiny_encoder(x)[0, p].log_softmax(-1)[s[p]].item()
        assert math.isclose(score, direct, rel_tol=1e-5, abs_tol=1e-5)
    assert got[4] == 0.0  # <s></s>: nothing to score


def test_holistic_score_equals_a_direct_computation(tiny_encoder):
    seqs = _seqs()
    got = zorro.holistic_scores(tiny_encoder, seqs, "cpu", max_elements=100)
    for s, score in zip(seqs, got, strict=True):
        x = torch.tensor([s])
        direct = -torch.nn.functional.cross_entropy(tiny_encoder(x)[0], x[0]).item()
        assert math.isclose(score, direct, rel_tol=1e-5)


def _results(tmp_path, scorer, seed, values):
    """A run folder of an mlm run with stored Zorro results (as eval=zorro stores them)."""
    run = tmp_path / f"{scorer}_s{seed}"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"task:\n  name: mlm\nscorer:\n  label: {scorer}\nseed: {seed}\n")
    rows = [
        {
            "scorer": scorer,
            "seed": seed,
            "paradigm": stem,
            "paper_name": name,
            "reported": bool(name),
            "method": "pll",
            "metric": "accuracy",
            "value": v,
            "step": 10,
        }
        for (stem, name), v in zip(
            [("binding-principle_a", "binding-principle_a"), ("ellipsis-n_bar", ""), ("mean (2)", "")],
            values,
            strict=True,
        )
    ]
    Store(run, "zorro", {"version": 1}, []).write({"results": pd.DataFrame(rows)})


def test_table3_layout_aggregates_seeds(tmp_path):
    _results(tmp_path, "ssa_n2", 0, [90, 60, 75])
    _results(tmp_path, "softmax", 0, [70, 50, 60])
    _results(tmp_path, "softmax", 1, [80, 60, 70])
    table = zorro_table.zorro_table([tmp_path])
    assert list(table.index) == ["binding-principle_a", "ellipsis-n_bar", "mean (2)"]
    assert [c for c in table.columns if " " not in c] == ["softmax", "ssa_n2"]
    row = table.loc["binding-principle_a"]
    assert (
        row["softmax"] == 75 and math.isclose(row["softmax sd"], math.sqrt(50)) and row["softmax seeds"] == 2
    )
    assert row["ssa_n2"] == 90 and row["paper softmax"] == 78.25 and row["paper ssa_n1.5"] == 87.9
    files = zorro_table.write_zorro_table(table, tmp_path / "out")
    assert all(f.exists() for f in files)
    md = (tmp_path / "out" / "zorro_table.md").read_text()
    assert "| binding-principle_a | 75.0 ± 7.1 (2) | 90.0 | 78.25 / 87.9 / 80.2 |" in md
    with pytest.raises(FileNotFoundError, match="eval=zorro"):
        zorro_table.zorro_table([tmp_path / "nothing"])


def test_zorro_table_script(tmp_path, capsys):
    _results(tmp_path, "softmax", 0, [70, 50, 60])
    assert commands.zorro_table([str(tmp_path), "--out", str(tmp_path / "t")]) == 0
    assert (tmp_path / "t" / "zorro_table.png").exists() and "binding-principle_a" in capsys.readouterr().out
    assert commands.zorro_table([str(tmp_path / "none")]) == 2


def test_mlm_run_dirs_finds_mlm_runs_only(tmp_path):
    for name, task in (("a", "mlm"), ("b", "linear")):
        (tmp_path / "sweep" / name).mkdir(parents=True)
        (tmp_path / "sweep" / name / "config.yaml").write_text(f"task:\n  name: {task}\n")
    assert zorro_table.mlm_run_dirs([tmp_path / "sweep"]) == [tmp_path / "sweep" / "a"]
    assert zorro_table.mlm_run_dirs([tmp_path / "sweep" / "b"]) == []
