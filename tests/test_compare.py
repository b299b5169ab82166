"""scripts/compare.py and ssa_repro/evaluation/compare.py: numbers checked against hand computations
from the runs' own CSVs, sweeps grouped by their overrides, clear errors, the script and the notebook."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import matplotlib
import numpy as np
import pandas as pd
import pytest
import yaml

from ssa_repro.evaluation import compare
from ssa_repro.training.trainer import train
from tests.conftest import ROOT, make_cfg

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny linear runs (2 × 2 σ grid in eval/quick/grid.csv): softmax and SSA."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for scorer in ("softmax", "ssa"):
        train(make_cfg(f"scorer={scorer}"), root / scorer)
        out[scorer] = root / scorer
    return out


def grid_by_hand(run) -> pd.DataFrame:
    g = pd.read_csv(run / "eval" / "quick" / "grid.csv")
    g = g[(g.predictor == "model") & (g.metric == "mse")]
    return g.pivot(index="sigma_f", columns="sigma_x", values="value").sort_index(ascending=False)


def test_difference_is_the_difference_of_the_grids(runs):
    comp = compare.collect([runs["softmax"], runs["ssa"]])
    assert (comp.task, comp.eval, comp.metric, comp.labels) == ("linear", "quick", "mse", ["softmax", "ssa"])
    assert compare.resolve_baseline(comp) == "softmax"
    a, b = grid_by_hand(runs["ssa"]), grid_by_hand(runs["softmax"])
    assert a.shape == (2, 2)
    plain = compare.difference(comp, mode="diff")
    assert list(plain) == ["ssa"]
    np.testing.assert_allclose(plain["ssa"].to_numpy(), (a - b).to_numpy(), rtol=1e-12)
    ratio = compare.difference(comp)  # MSE: log10 ratio by default
    np.testing.assert_allclose(ratio["ssa"].to_numpy(), np.log10(a / b).to_numpy(), rtol=1e-12)
    # the other way round with --baseline
    back = compare.difference(comp, baseline="ssa", mode="diff")
    np.testing.assert_allclose(back["softmax"].to_numpy(), (b - a).to_numpy(), rtol=1e-12)


def test_one_shared_colour_scale(runs):
    comp = compare.collect([runs["softmax"], runs["ssa"]])
    both = np.concatenate([grid_by_hand(runs[s]).to_numpy().ravel() for s in ("softmax", "ssa")])
    plot = compare.plot_grids(comp)
    assert plot.log and plot.vmin == pytest.approx(both.min()) and plot.vmax == pytest.approx(both.max())
    meshes = [ax.collections[0] for ax in plot.fig.axes if ax.collections]
    panels = [m for m in meshes if m.get_array() is not None and m.get_array().size == 4]
    assert len(panels) == 2
    assert {(m.norm.vmin, m.norm.vmax) for m in panels} == {(plot.vmin, plot.vmax)}
    assert len(plot.fig.axes) == 3  # two panels and ONE colour bar
    diff = compare.plot_difference(comp)
    lim = np.abs(compare.difference(comp)["ssa"].to_numpy()).max()
    assert (diff.vmin, diff.vmax) == pytest.approx((-lim, lim))  # centred on 0
    matplotlib.pyplot.close("all")


def test_summary_numbers_by_hand(runs):
    comp = compare.collect([runs["softmax"], runs["ssa"]])
    table = compare.summary_table(comp).set_index("label")
    for scorer in ("softmax", "ssa"):
        g = grid_by_hand(runs[scorer])
        row = table.loc[scorer]
        assert row["mean"] == pytest.approx(g.to_numpy().mean())
        assert row["geo_mean"] == pytest.approx(10 ** np.log10(g.to_numpy()).mean())
        assert row["in_dist"] == pytest.approx(g.loc[1.0, 1.0])
        assert row["worst"] == pytest.approx(g.to_numpy().max())
        sf, sx = g.stack().idxmax()
        assert row["worst_cell"] == f"σ_F={sf:g}, σ_I={sx:g}"
        assert row["n_cells"] == 4
    a, b = grid_by_hand(runs["ssa"]).to_numpy(), grid_by_hand(runs["softmax"]).to_numpy()
    assert table.loc["ssa", "beats_baseline"] == pytest.approx((a < b).mean())
    assert np.isnan(table.loc["softmax", "beats_baseline"])
    md = compare.markdown_table(table.reset_index())
    assert md.splitlines()[0].startswith("| label | runs |") and len(md.splitlines()) == 4


def _job(sweep, num, scorer, seed, source, shift=None):
    """A fake sweep job: overrides.yaml, config.yaml; with results (grid values + shift) unless None."""
    d = sweep / f"{num}_linear_{scorer}_gpt2_s{seed}"
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(
        yaml.safe_dump([f"scorer={scorer}", f"seed={seed}", "train.steps=6"])
    )
    cfg = yaml.safe_load((source / "config.yaml").read_text())
    cfg["seed"], cfg["scorer"]["label"] = seed, scorer
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    if shift is not None:
        (d / "eval" / "quick").mkdir(parents=True)
        g = pd.read_csv(source / "eval" / "quick" / "grid.csv")
        g["value"] = g["value"] + shift
        g.to_csv(d / "eval" / "quick" / "grid.csv", index=False)
        shutil.copy(source / "summary.json", d / "summary.json")
    return d


def test_sweep_groups_by_overrides_and_averages_seeds(runs, tmp_path):
    sweep = tmp_path / "multirun" / "2026-01-01_00-00-00"
    _job(sweep, 0, "softmax", 0, runs["softmax"], 0.0)
    _job(sweep, 1, "softmax", 1, runs["softmax"], 1.0)
    _job(sweep, 2, "ssa", 0, runs["ssa"], 0.0)
    _job(sweep, 3, "ssa", 1, runs["ssa"], 3.0)
    late = _job(sweep, 4, "ssa", 2, runs["ssa"], None)  # started, not finished
    comp = compare.collect([sweep])
    assert comp.sweep == sweep and comp.labels == ["scorer=softmax", "scorer=ssa"]
    assert [g.seeds for g in comp.groups] == [[0, 1], [0, 1]]
    assert comp.common_overrides == ["train.steps=6"]
    assert comp.missing == [(str(late), "training not finished (no summary.json)")]
    for label, scorer, shift in (("scorer=softmax", "softmax", 1.0), ("scorer=ssa", "ssa", 3.0)):
        base = grid_by_hand(runs[scorer])
        np.testing.assert_allclose(comp.grid(label).to_numpy(), (base + shift / 2).to_numpy())
        std = np.std([0.0, shift], ddof=1)  # the two seeds differ by `shift` in every cell
        np.testing.assert_allclose(comp.grid(label, "std").to_numpy(), std)
        assert (comp.grid(label, "count").to_numpy() == 2).all()
    assert "seeds 0, 1 (n=2" in comp.groups[0].describe()
    assert compare.resolve_baseline(comp) == "scorer=softmax"
    assert compare.resolve_baseline(comp, "ssa") == "scorer=ssa"
    result = compare.write(comp, compare.default_out_dir(comp))
    assert result["out_dir"] == sweep / "compare"
    md = (sweep / "compare" / "summary.md").read_text()
    assert f"`{late.name}`: training not finished" in md
    assert result["summary"]["seed_std_mean"].tolist() == pytest.approx(
        [np.std([0, 1.0], ddof=1), np.std([0, 3.0], ddof=1)]
    )


def test_errors_before_any_work(runs, tmp_path):
    with pytest.raises(compare.CompareError, match="neither a run folder .* nor a sweep folder"):
        compare.collect([runs["softmax"], tmp_path])
    with pytest.raises(compare.CompareError, match="lies inside the run folder"):
        compare.collect([runs["softmax"], runs["ssa"] / "eval"])
    with pytest.raises(compare.CompareError, match="does not exist"):
        compare.collect([runs["softmax"], tmp_path / "nope"])
    # another task
    other = tmp_path / "every"
    shutil.copytree(runs["ssa"], other, ignore=shutil.ignore_patterns("checkpoints"))
    cfg = yaml.safe_load((other / "config.yaml").read_text())
    cfg["task"]["name"] = "every"
    (other / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(
        compare.CompareError, match=r"different tasks cannot be compared:\n  - linear: .*\n  - every: "
    ):
        compare.collect([runs["softmax"], other])
    # an evaluation not every run has
    with pytest.raises(compare.CompareError, match="no common evaluation: wanted linear_grid"):
        compare.collect([runs["softmax"], runs["ssa"]], eval="linear_grid")
    # grids with different axes
    small = tmp_path / "small"
    shutil.copytree(runs["ssa"], small, ignore=shutil.ignore_patterns("checkpoints"))
    g = pd.read_csv(small / "eval" / "quick" / "grid.csv")
    g[g.sigma_x == 1.0].to_csv(small / "eval" / "quick" / "grid.csv", index=False)
    with pytest.raises(compare.CompareError, match=r"grids differ in sigma_x \(σ_I.*\n.*\[1, 2\]\n.*\[1\]"):
        compare.collect([runs["softmax"], small])
    with pytest.raises(compare.CompareError, match="metric 'token_error' is not in"):
        compare.collect([runs["softmax"], runs["ssa"]], metric="token_error")
    comp = compare.collect([runs["softmax"], runs["ssa"]])
    with pytest.raises(compare.CompareError, match="matches no run or group"):
        compare.resolve_baseline(comp, "cosformer")
    with pytest.raises(compare.CompareError, match="never write into a run"):
        compare.write(comp, runs["ssa"] / "compare")


def _script(*args, **kw):
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "compare.py"), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "WANDB_MODE": "disabled"},
        **kw,
    )


@pytest.mark.slow
def test_script_end_to_end(runs, tmp_path):
    proc = _script(runs["softmax"], runs["ssa"])
    assert proc.returncode == 0, proc.stderr
    made = list((runs["softmax"].parent / "compare").iterdir())  # <common parent>/compare/<time>
    assert len(made) == 1
    out = made[0]
    for name in (
        "heatmaps.png",
        "heatmaps.pdf",
        "difference.png",
        "summary.csv",
        "summary.md",
        "cells.csv",
        "compare.json",
    ):
        assert (out / name).is_file(), name
    assert "| softmax |" in proc.stdout and "| ssa |" in proc.stdout
    shutil.rmtree(out.parent)
    bad = _script(runs["softmax"], tmp_path)
    assert (
        bad.returncode == 2 and "Error: cannot compare" in bad.stderr and "neither a run folder" in bad.stderr
    )


@pytest.mark.slow
def test_notebook_runs_headless(runs, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("SSA_RUNS", os.pathsep.join(str(runs[s]) for s in ("softmax", "ssa")))
    nb = nbformat.read(ROOT / "notebooks" / "analysis.ipynb", as_version=4)
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}
    ).execute()
    outputs = {c["id"]: c.get("outputs", []) for c in nb.cells if c["cell_type"] == "code"}
    assert not [o for outs in outputs.values() for o in outs if o["output_type"] == "error"]
    images = [o for outs in outputs.values() for o in outs if "image/png" in o.get("data", {})]
    assert len(images) >= 3  # heat maps, difference map, custom view
    text = "".join(o.get("text", "") for outs in outputs.values() for o in outs)
    assert "shared scale:" in text and "linear, eval/quick, mse" in text
