"""The scorer diagnostics (ssa_repro/cli/scorer_diagnostics.py: saturation, step costs) and the report
(scripts/scorer_report.py, ssa_repro/cli/scorer_report.py).

Saturation is checked against the independent table in the reference notes (scorers.md: weight on one
key whose logit beats the other N − 1, all at 0, by g) and against closed forms written here.
"""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ssa_repro.cli import scorer_diagnostics, scorer_report
from ssa_repro.config import load_scorer, scorer_options

ROOT = Path(__file__).resolve().parents[1]


saturation, step_costs = scorer_diagnostics.saturation, scorer_diagnostics.step_costs
REF_GRID = [(16, 5.0), (16, 10.0), (16, 20.0), (80, 20.0)]  # scorers.md's columns (N, g)
GRID = [(2, 0.5), (16, 1.0), (16, 5.0), (16, 20.0), (80, 3.0), (80, 20.0)]

# scorers.md, "Saturation" table
REFERENCE = {
    "softmax": (0.908, 0.999, 1.000, 1.000),
    "ssa_nanogpt": (0.784, 0.907, 0.964, 0.835),  # SSA b = e, n = 1.49
    "ssa_triton": (0.427, 0.643, 0.824, 0.470),  # SSA b = 0.8, n = 1.5
    "sparsemax": (1.0, 1.0, 1.0, 1.0),
    "entmax15": (1.0, 1.0, 1.0, 1.0),
    "ssmax": (0.963, 1.000, 1.000, 1.000),  # s = 0.43
}


@pytest.fixture(scope="module")
def scorers():
    return {opt: load_scorer(opt) for opt in scorer_options()}


def closed_ssa(n_keys, g, b, n):
    top = (1.0 + b * g) ** n
    return top / (top + n_keys - 1)


def closed_softmax(n_keys, g, scale=1.0):
    return math.exp(scale * g) / (math.exp(scale * g) + n_keys - 1)


@pytest.mark.parametrize("option", sorted(REFERENCE))
def test_saturation_reproduces_reference_table(scorers, option):
    ours = [saturation(scorers[option], n, g) for n, g in REF_GRID]
    assert [round(x, 3) for x in ours] == pytest.approx(REFERENCE[option], abs=1e-9)


@pytest.mark.parametrize(
    "option, b, n",
    [
        ("ssa", 1.0, 1.5),
        ("ssa_n1.5", 1.0, 1.5),
        ("ssa_n2", 1.0, 2.0),
        ("ssa_nanogpt", math.e, math.exp(0.4)),
        ("ssa_triton", 0.8, 1.5),
    ],
)
def test_saturation_ssa_closed_form(scorers, option, b, n):
    for n_keys, g in GRID:
        assert saturation(scorers[option], n_keys, g) == pytest.approx(closed_ssa(n_keys, g, b, n), rel=1e-6)


@pytest.mark.parametrize("option", ["softmax", "temperature", "hybrid", "sa_softmax"])
def test_saturation_softmax_closed_form(scorers, option):
    # temperature: τ = 1 at init; hybrid: head 0 is softmax; sa_softmax: the top key's factor is 1
    for n_keys, g in GRID:
        assert saturation(scorers[option], n_keys, g) == pytest.approx(closed_softmax(n_keys, g), rel=1e-6)


def test_saturation_ssmax_and_average_closed_forms(scorers):
    average = load_scorer("hybrid", overrides=["scorer.heads=[average]"])
    for n_keys, g in GRID:
        expected = closed_softmax(n_keys, g, scale=0.43 * math.log(n_keys))
        assert saturation(scorers["ssmax"], n_keys, g) == pytest.approx(expected, rel=1e-6)
        assert saturation(average, n_keys, g) == pytest.approx(1.0 / n_keys, rel=1e-12)


def test_saturation_sparse_are_one_hot_at_large_gaps(scorers):
    for option in ("sparsemax", "entmax15", "entmax_alpha"):
        assert saturation(scorers[option], 16, 5.0) == pytest.approx(1.0, abs=1e-6)


def test_cosformer_saturation_is_nan(scorers):
    assert math.isnan(saturation(scorers["cosformer"], 16, 5.0))


def test_load_scorer_equals_composing_with_its_sizes():
    """load_scorer composes an option once and sets n_head and max_positions on the copy: the scorer's
    resolved config equals Hydra's composition with them as overrides (CosFormer's m interpolates
    max_positions), and an override of either still wins."""
    from hydra import compose, initialize_config_dir

    from ssa_repro.config import CONF_DIR

    for option, n_head, max_positions in (("cosformer", 4, 100), ("cosformer", 2, 37), ("ssa", 3, 64)):
        got = load_scorer(option, n_head=n_head, max_positions=max_positions)
        ov = [f"scorer={option}", f"model.n_head={n_head}", f"model.max_positions={max_positions}"]
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            want = compose("train", overrides=[*ov, "model.n_embd=256"]).scorer
        assert OmegaConf.to_container(got.cfg, resolve=True) == OmegaConf.to_container(want, resolve=True)
    assert load_scorer("cosformer", max_positions=100).cfg.m == 100
    for ov in ("model.max_positions=50", "++model.max_positions=50"):
        assert load_scorer("cosformer", max_positions=100, overrides=[ov]).cfg.m == 50


def test_scorer_options_are_the_yaml_stems():
    stems = sorted(
        p.name[: -len(".yaml")] for p in (ROOT / "conf" / "scorer").iterdir() if p.name.endswith(".yaml")
    )
    assert scorer_options() == stems
    assert {"softmax", "ssa", "ssa_nanogpt", "ssa_triton", "cosformer"} <= set(stems)


def test_step_costs_are_positive(scorers):
    med = step_costs({"ssa": scorers["ssa"], "sdpa": None}, B=2, H=8, T=8, d=8, reps=2)
    assert med["ssa"] > 0 and med["sdpa"] > 0


@pytest.mark.slow
def test_report_script_writes_everything(tmp_path, capsys):
    out = tmp_path / "report"
    scorer_report.main(["--out", str(out), "--reps", "1", "--cost-shape", "2", "8", "8", "8"])
    stdout = capsys.readouterr().out

    for name in ("saturation.csv", "saturation.md", "base_functions.png", "base_functions.pdf"):
        assert (out / name).stat().st_size > 0, name
    for name in ("cost.csv", "cost.md", "report.md"):
        assert (out / name).stat().st_size > 0, name

    with open(out / "saturation.csv") as f:
        rows = list(csv.DictReader(f))
    assert set(rows[0]) == {"option", "N", "g", "weight"}
    options = scorer_options()
    assert set(options) <= {r["option"] for r in rows}
    by_key = {(r["option"], int(r["N"]), float(r["g"])): r["weight"] for r in rows}
    assert float(by_key[("softmax", 16, 5.0)]) == pytest.approx(closed_softmax(16, 5.0), abs=1e-6)
    assert float(by_key[("ssa_triton", 80, 20.0)]) == pytest.approx(0.470, abs=5e-4)
    assert by_key[("cosformer", 16, 5.0)] == ""  # nan: scores q and k

    sat_md = (out / "saturation.md").read_text()
    assert "n/a (scores q, k)" in sat_md
    assert "SSA b=e, n=1.49" in sat_md and "SSA b=0.8, n=1.5" in sat_md
    for opt in options:
        assert f"| {opt} |" in sat_md
    with open(out / "cost.csv") as f:
        cost_rows = {r["variant"] for r in csv.DictReader(f)}
    assert {"SDPA", "softmax (eager)", *options} <= cost_rows
    assert "base_functions.png" in (out / "report.md").read_text()
    assert "MISMATCH" not in stdout and "total wall time" in stdout


def test_the_script_answers_help_before_loading_torch():
    """scripts/scorer_report.py is a thin entry: --help is the parser of cli/arguments.py, torch unloaded."""
    code = (
        "import runpy, sys; sys.argv = ['scorer_report.py', '--help']\n"
        "try:\n    runpy.run_path('scripts/scorer_report.py', run_name='__main__')\n"
        "except SystemExit:\n    pass\nprint('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--cost-shape" in out.stdout and out.stdout.strip().endswith("False")
