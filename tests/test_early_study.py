"""The early-learning study (conf/study/early_cpu.yaml, report ssa_repro/reports/kinds/early.py): checkpoints kept
at chosen steps and evaluated there (learning curves), the paired design (same initial weights and batches
per seed under every scorer), and the quick study end to end on a small synthetic data folder of the real
layout, its report's numbers read back against the stored cells."""

from __future__ import annotations

import glob
import json
import math
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ssa_repro import stats
from ssa_repro.cli.run_study import main as study_main
from ssa_repro.config import CONF_DIR
from ssa_repro.core.rundir import RunDir, RunFolderError
from ssa_repro.evaluation.lm import chance
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.multiple_choice import Item
from ssa_repro.reports import early_cells, early_tables, paired
from ssa_repro.reports.kinds import early
from ssa_repro.studies import engine, study
from ssa_repro.tasks import curriculum
from ssa_repro.training import trainer, validate
from ssa_repro.training.run_state import TrainingRun
from tests.conftest import make_cfg

# the early-learning report's claims as early_cpu.yaml declares them (early_quick inherits them)
EARLY_CLAIMS = OmegaConf.to_container(study.load("early_cpu").claims)
WORDS = "the a dog cat ball mommy daddy sees wants likes big red is are you we look here there".split()
ZORRO = (  # two of the paper's 12 and one other
    "agreement_subject_verb-across_relative_clause",
    "irregular-verb",
    "quantifiers-existential_there",
)
SENTENCES = [
    "the cat sat on the mat and looked at the dog .",
    "a dog ran in the park with a red ball .",
    "we like to read books about cats and dogs .",
]


def tiny_data(root: Path) -> Path:
    """The shared data folder's layout in miniature: AO-CHILDES, Zorro, the LM corpora, two LM-eval tasks."""
    rng = random.Random(0)
    (root / "childes").mkdir(parents=True)
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(1, 9))) + " ." for _ in range(400)]
    (root / "childes" / "aochildes_partial.txt").write_text("\n".join(lines) + "\n")
    z = root / "zorro"
    z.mkdir()
    for k, stem in enumerate(ZORRO):
        pairs = [
            (f"the dog are here {WORDS[(i + k) % 9]} .", f"the dog is here {WORDS[(i + k) % 9]} .")
            for i in range(8)
        ]
        (z / f"{stem}.txt").write_text("".join(f"{bad}\n{good}\n" for bad, good in pairs))
    (z / "names.tsv").write_text(
        "paper_name\tfile_stem\tcertainty\n"
        f"agr_subj_verb-across_RC\t{ZORRO[0]}\tcertain\nirregular-verb\t{ZORRO[1]}\tcertain\n"
    )
    (root / "lm").mkdir()
    docs = [" ".join(SENTENCES[(i + j) % 3] for j in range(3)) for i in range(60)]
    (root / "lm" / "train.txt").write_text("\n\n".join(docs) + "\n")
    for name in ("valid", "test"):
        (root / "lm" / f"{name}.txt").write_text(" \n = Title = \n \n " + " ".join(SENTENCES * 4) + " \n")
    (root / "lm_eval").mkdir()
    copa = [
        {
            "premise": "The dog ran.",
            "choice1": "It saw a cat.",
            "choice2": "It slept.",
            "question": "cause",
            "label": i % 2,
        }
        for i in range(6)
    ]
    boolq = [
        {"question": "is the dog red", "passage": SENTENCES[i % 3], "label": int(i < 4)} for i in range(6)
    ]
    for name, docs_ in (("copa", copa), ("boolq", boolq)):
        (root / "lm_eval" / f"{name}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs_))
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return tiny_data(tmp_path_factory.mktemp("early") / "data")


def extra(data: Path) -> tuple[str, ...]:
    return (f"data.root={data}", f"data.cache_dir={data.parent / 'cache'}")


# ------------------------------------------------------------------ checkpoints at chosen steps
def test_kept_checkpoints_leave_training_unchanged_and_load_by_step(tmp_path):
    over = ("train.steps=6", "train.ckpt_interval=6", "train.log_interval=3", "train.compile=false")
    plain_run = trainer.train(make_cfg(*over), tmp_path / "plain")
    kept = trainer.train(make_cfg(*over, "train.keep_at=[2,5]"), tmp_path / "kept")
    assert kept["final_loss"] == plain_run["final_loss"]  # keeping a checkpoint changes nothing
    assert RunDir(tmp_path / "kept").kept_steps() == [2, 5] and RunDir(tmp_path / "plain").kept_steps() == []
    a = load_run(tmp_path / "plain", torch.device("cpu"))
    b = load_run(tmp_path / "kept", torch.device("cpu"))
    for k, v in a.model.state_dict().items():
        assert torch.equal(v, b.model.state_dict()[k]), k
    early_run = load_run(tmp_path / "kept", torch.device("cpu"), step=2)
    assert early_run.step == 2 and early_run.labels["step"] == 2
    assert load_run(tmp_path / "kept", torch.device("cpu"), step=6).step == 6  # the last, by its step
    assert not torch.equal(early_run.model.state_dict()["wpe.weight"], b.model.state_dict()["wpe.weight"])
    with pytest.raises(RunFolderError, match=r"no checkpoint of step 3.*\[2, 5\]"):
        load_run(tmp_path / "kept", torch.device("cpu"), step=3)


def test_keep_at_outside_training_is_refused_naming_the_key():
    found = validate.problems(make_cfg("train.steps=6", "train.keep_at=[0,3,7]"))
    assert any("train.keep_at=[0, 3, 7] has [0, 7]" in p and "train.steps=6" in p for p in found), found


def test_an_evaluation_step_without_a_kept_checkpoint_stops_the_study():
    s = study.load("early_quick")
    job = study.jobs(s)[0]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[*job.overrides, "train.keep_at=[10]"])
    found = study.step_problems(s, "zorro_early", cfg)
    assert found == [
        "evaluations.zorro_early.steps has 5, but the job keeps no checkpoint there: add it to train.keep_at=[10] "
        "(train.steps=10)"
    ]


def test_the_lm_evaluations_tasks_key_is_its_own_not_the_studys():
    s = study.load("early_cpu")
    lm = study.evaluations(s, "lm", "lm")
    assert list(lm["lm"].tasks)[:2] == ["arc_challenge", "arc_easy"] and list(lm["lm_curve"].tasks) == []
    assert "steps" not in lm["lm"] and list(study.evaluations(s, "mlm", "mlm")) == ["zorro_early", "zorro"]
    assert list(study.evaluations(s, "mlm", "curves")) == ["zorro_curve"]
    assert study.eval_steps(s, "zorro") == [4000] and study.eval_steps(s, "zorro_early") == [500, 1500]


def test_chance_levels_of_multiple_choice_items():
    items = [Item(["q"] * 4, [" a", " b", " c", " d"], g) for g in (0, 0, 1, 3)]
    items.append(Item(["q"] * 2, [" yes", " no"], 0))
    out = chance(items)
    assert out["chance"] == pytest.approx((4 * 0.25 + 0.5) / 5) and out["majority"] == pytest.approx(3 / 5)
    assert chance([Item(["ctx"], [" word"], 0)]) == {"chance": 0.0, "majority": 0.0}


def test_the_full_study_has_the_seeds_its_claims_need():
    s = study.load("early_cpu")
    mlm = s.groups.mlm
    assert set(mlm.scorers) == {"softmax", "ssa_n1.5", "ssa_n2"} and len(s.seeds) >= 5
    # the largest claim family of the encoder leg (argument structure) has 3 contrasts
    assert 3 * 2.0 ** (1 - len(s.seeds)) < 0.05
    assert set(s.groups.lm.scorers) == {"softmax", "ssa"} and len(s.groups.lm.seeds) >= 3
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for scorer, n in (("ssa_n1.5", 1.5), ("ssa_n2", 2.0)):  # the paper's fixed exponents
            cfg = compose("train", overrides=[f"scorer={scorer}"])
            assert cfg.scorer.learn_n is False and cfg.scorer.n_init == n


# ------------------------------------------------------------------ the paired design
@pytest.mark.parametrize("leg", ["mlm", "lm"])
def test_a_seed_gives_every_scorer_the_same_initial_weights_and_batches(leg, data, tmp_path):
    s = study.load("early_quick")
    todo = [j for j in study.jobs(s, extra(data)) if j.group == leg and j.seed == 1]
    assert len({j.scorer for j in todo}) == len(s.groups[leg].scorers) >= 2
    built = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for job in todo:
            cfg = compose("train", overrides=list(job.overrides))
            built.append((job.scorer, cfg, trainer.build(TrainingRun(cfg, tmp_path / job.name))))
    (_, cfg0, base), others = built[0], built[1:]
    tr = cfg0.train
    stage = curriculum.stage(cfg0.curriculum, 0)
    first = [trainer.draw_batch(base.task, i, tr.batch_size, stage, base.gen, base.device) for i in range(3)]
    weights = {k: v for k, v in base.model.state_dict().items() if ".scorer." not in k}
    assert len(weights) > 10
    for scorer, _, other in others:
        theirs = other.model.state_dict()
        for k, v in weights.items():
            assert torch.equal(v, theirs[k]), (scorer, k)
        assert any(".scorer." in k for k in theirs), scorer  # SSA's b (and n) are the only extra
        for i, batch in enumerate(first):
            again = trainer.draw_batch(other.task, i, tr.batch_size, stage, other.gen, other.device)
            for name in ("tokens", "targets"):
                if hasattr(batch, name):
                    assert torch.equal(getattr(batch, name), getattr(again, name)), (scorer, i, name)
    # and another seed differs
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        job0 = next(j for j in study.jobs(s, extra(data)) if j.group == leg and j.seed == 0)
        seed0 = trainer.build(
            TrainingRun(compose("train", overrides=list(job0.overrides)), tmp_path / "seed0")
        )
    assert not all(torch.equal(v, seed0.model.state_dict()[k]) for k, v in weights.items())


# ------------------------------------------------------------------ the quick study end to end
def _raw_zorro(run_dir: Path) -> pd.DataFrame:
    parts = glob.glob(str(run_dir / "eval" / "zorro" / "*" / "parts" / "results-*.csv"))
    assert parts, run_dir
    return pd.concat([pd.read_csv(p) for p in parts], ignore_index=True)


@pytest.mark.slow
def test_early_quick_end_to_end_and_the_report_reads_back(data, tmp_path):
    root = engine.run("early_quick", tmp_path / "root", n_jobs=1, extra=extra(data))
    index = pd.read_csv(root / "index.csv")
    assert index.job.nunique() == len(study.jobs(study.load("early_quick")))
    z = index[index["eval"] == "zorro"]
    assert set(z[z.group == "mlm"].steps) == {"5", "10"} and set(z[z.group == "curves"].steps) == {"5 10 20"}
    assert set(z[z.group == "curves"].evaluation) == {"zorro_curve"}  # groups: restricts an evaluation
    for run_dir in z[z.group == "mlm"].run_dir:  # cells at both checkpoints; holistic at the last
        raw = _raw_zorro(Path(run_dir))
        assert set(raw.step) == {5, 10} and set(raw[raw.step == 10].method.dropna()) >= {"pll", "holistic"}

    out = tmp_path / "report"
    assert study_main(["early_quick", "--report-only", "--root", str(root), "--out", str(out)]) == 0
    text = (out / "early_quick.md").read_text()
    for heading in (
        "## Findings",
        "## The paper's claims",
        "**Decision rule**",
        "## Choosing the regime: learning curves",
        "## Zorro at the last checkpoint: the paper's table 3 beside ours",
        "## Zorro by holistic scoring",
        "## Held-out masked-LM loss over training",
        "## Perplexity over training",
        "## LM-eval tasks: the paper's table 2 beside ours",
        "## Power for the effects seen",
        "## Missing",
        "## At the paper's scale",
        "## Setup",
    ):
        assert heading in text, heading
    assert "No data yet" not in text
    assert "Nothing: every group and evaluation is stored." in text
    assert "early_quick --report-only" in text and "trained at commit" in text
    for fig in ("zorro_curves", "zorro_table3", "perplexity_curves", "regime"):
        path = out / "early_quick" / f"{fig}.png"
        assert path.exists() and path.stat().st_size > 2000, fig
    assert "55.5 / 57.7 / 61.55" in text  # the paper's table 3 beside ours (agreement across RC)
    assert f"(paper {61.55 - 55.5:+.1f})" in text  # and the paper's SSA-2 − softmax beside our contrast
    # the regime section: one learning curve per candidate size (group × architecture), each checkpoint
    regime = text.split("## Choosing the regime")[1].split("\n## ")[0]
    assert "| curves | small | 0 | 20 |" in regime and "| curves_wide | wide | 0 | 10 |" in regime

    # a per-seed value against the raw stored parts: softmax seed 1, agreement across RC, PLL, step 5
    csvs = {
        p.name.removeprefix("per_seed_").split(".")[0]: p
        for p in (out / "early_quick").glob("per_seed_*.csv*")
    }
    assert set(csvs) == {"zorro", "lm"}
    per = pd.read_csv(csvs["zorro"])
    row = index[(index.evaluation == "zorro") & (index.scorer == "softmax") & (index.seed == 1)].iloc[0]
    raw = _raw_zorro(Path(row.run_dir))
    want = raw[(raw.step == 5) & (raw.paradigm == ZORRO[0]) & (raw.method == "pll")].value.iloc[0]
    got = per[
        (per.scorer == "softmax")
        & (per.seed == 1)
        & (per.step == 5)
        & (per.item == ZORRO[0])
        & (per.method == "pll")
    ]
    assert len(got) == 1 and got.value.iloc[0] == pytest.approx(want, rel=1e-5)
    lm = pd.read_csv(csvs["lm"])
    assert set(lm[lm.metric == "perplexity"].step) == {5, 10}
    assert {"task_accuracy", "chance", "majority"} <= set(lm.metric)

    # the claims recomputed from the published CSVs alone equal the report's claims file
    _, claims, table, _ = early.compute(csvs, EARLY_CLAIMS)
    published = pd.read_csv(out / "early_quick_claims.csv")
    assert len(table) == len(published) > 0
    assert np.allclose(
        table.estimate.to_numpy(float), published.estimate.to_numpy(float), rtol=1e-4, atol=1e-9
    )
    assert list(table.verdict) == list(published.verdict)
    assert set(table.verdict) <= {*stats.VERDICTS, paired.NOT_LEARNED}
    # and by hand: one contrast from the CSV's values
    r = table[table.claim == "zorro irregular ssa_n1.5"].iloc[0]
    # the paired group only: the curve groups' softmax seed 0 is another run at the same step
    sub = per[
        (per.group == "mlm") & (per.item == "irregular-verb") & (per.method == "pll") & (per.step == 10)
    ]
    d = (
        sub[sub.scorer == "ssa_n1.5"].set_index("seed").value
        - sub[sub.scorer == "softmax"].set_index("seed").value
    )
    assert r.estimate == pytest.approx(d.mean(), abs=1e-9) and r.n_seeds == 2

    # resuming does no work: every job finished, every cell stored
    before = sorted(p.stat().st_mtime_ns for p in root.rglob("parts/*.csv"))
    engine.run("early_quick", root, n_jobs=1, extra=extra(data))
    assert sorted(p.stat().st_mtime_ns for p in root.rglob("parts/*.csv")) == before


def test_the_setup_names_the_report():
    assert OmegaConf.select(study.load("early_quick"), "report") == "early"


def _zorro_frame(acc: dict[tuple[str, str], float], n: int = 500, seeds: int = 7) -> pd.DataFrame:
    """A per-seed Zorro frame at one step: accuracy (%) per (scorer, item), the same for every seed
    but for a ±0.2 point wobble, so the paired contrasts have a spread."""
    rows = []
    for (scorer, item), v in acc.items():
        for s in range(seeds):
            rows.append(
                {
                    "part": "zorro",
                    "group": "mlm",
                    "task": "mlm",
                    "scorer": scorer,
                    "arch": "small",
                    "train_sigma": 1.0,
                    "seed": s,
                    "evaluation": "zorro",
                    "step": 4000,
                    "method": "pll",
                    "item": item,
                    "metric": "zorro_accuracy",
                    "n": n,
                    "value": v + 0.2 * (s % 3 - 1),
                }
            )
    return pd.DataFrame(rows)


def test_a_probe_neither_arm_scores_above_chance_on_is_not_judged():
    """Wilson (statsmodels) on the seed-mean accuracy over the probe's pairs: 53% of 500 pairs is not
    above chance (lower bound 48.6%), 56% is (51.6%); a contrast between two arms at chance is shown, not
    judged, and a contrast with one arm above chance is judged. The means are always judged."""
    from statsmodels.stats.proportion import proportion_confint

    assert (
        proportion_confint(265, 500, method="wilson")[0]
        < 0.5
        < proportion_confint(280, 500, method="wilson")[0]
    )
    rc, irr, pron = ZORRO[0], "irregular-verb", "anaphor_agreement-pronoun_gender"
    frame = _zorro_frame(
        {
            ("softmax", rc): 50.0,
            ("ssa_n2", rc): 53.0,  # neither above chance
            ("softmax", irr): 50.0,
            ("ssa_n1.5", irr): 56.0,  # one above
            ("softmax", pron): 49.0,
            ("ssa_n1.5", pron): 51.0,
            ("softmax", early_cells.MEAN_12): 50.0,
            ("ssa_n1.5", early_cells.MEAN_12): 50.5,
            ("ssa_n2", early_cells.MEAN_12): 50.2,
        }
    )
    specs = {(c.key, s.label): s for c in early.claims(frame, EARLY_CLAIMS) for s in c.specs}
    assert not specs[("zorro agr_rc ssa_n2", f"ssa_n2 − softmax, {rc}")].judged
    assert specs[("zorro irregular ssa_n1.5", f"ssa_n1.5 − softmax, {irr}")].judged
    assert not specs[("zorro pron_gender ssa_n1.5", f"ssa_n1.5 − softmax, {pron}")].judged
    assert specs[("zorro mean12", f"ssa_n1.5 − softmax, {early_cells.MEAN_12}")].judged
    table = paired.claims_table(frame, early.claims(frame, EARLY_CLAIMS), n_boot=500).set_index("claim")
    assert table.loc["zorro agr_rc ssa_n2", "verdict"] == paired.NOT_LEARNED
    assert table.loc["zorro irregular ssa_n1.5", "verdict"] != paired.NOT_LEARNED
    assert table.loc["zorro irregular ssa_n1.5", "estimate"] == pytest.approx(6.0)


def test_an_lm_eval_task_at_the_majority_answer_is_not_judged():
    """The floor of an LM-eval task is the higher of chance and the majority answer: BoolQ at 62% with a
    63% majority answer is not learned, COPA at 66% of 100 items over a 55% majority is (Wilson 56.3%)."""
    rows = []
    for task, n, acc, chance_, majority in (
        ("boolq", 500, (0.62, 0.62), 0.5, 0.63),
        ("copa", 100, (0.55, 0.66), 0.5, 0.55),
    ):
        for scorer, a in zip(("softmax", "ssa"), acc):
            for s in range(3):
                for metric, v in (("task_accuracy", a), ("chance", chance_), ("majority", majority)):
                    rows.append(
                        {
                            "part": "lm",
                            "group": "lm",
                            "task": "lm",
                            "scorer": scorer,
                            "arch": "small",
                            "train_sigma": 1.0,
                            "seed": s,
                            "evaluation": "lm",
                            "step": 1000,
                            "method": "0-shot",
                            "item": task,
                            "metric": metric,
                            "n": n,
                            "value": v,
                        }
                    )
    ppl = [
        {**r, "method": "stream", "item": "heldout", "metric": "perplexity", "n": 4096, "value": 300.0}
        for r in rows[:1]
    ]
    ppl += [{**ppl[0], "scorer": "ssa"}]
    frame = pd.DataFrame(rows + ppl)  # the LM claims need the perplexity's last step
    specs = {
        s.label: s
        for c in early.claims(frame, EARLY_CLAIMS)
        for s in c.specs
        if c.key.startswith("lm lm_eval")
    }
    assert not specs["ssa − softmax, boolq"].judged and specs["ssa − softmax, copa"].judged
    # an open-answer task (chance 0): 1 of 500 right is not learning; 5% is (Wilson 3.4% > the 2% margin)
    for acc, want in ((0.002, False), (0.05, True)):
        lam = frame[frame["item"] == "boolq"].assign(item="lambada_openai")
        lam.loc[lam.metric == "task_accuracy", "value"] = acc
        lam.loc[lam.metric.isin(["chance", "majority"]), "value"] = 0.0
        spec = {s.label: s for c in early.claims(pd.concat([frame, lam]), EARLY_CLAIMS) for s in c.specs}
        assert spec["ssa − softmax, lambada_openai"].judged is want


def test_seeds_to_call_a_holm_family():
    # the fewest n with k · 2^(1−n) < 0.05, by the exact sign-flip test's smallest p (enumerated)
    for k, want in ((1, 6), (3, 7), (8, 9), (14, 10)):
        assert stats.seeds_to_call(k) == want
        assert k * 2.0 ** (1 - want) < 0.05 <= k * 2.0 ** (2 - want)


def test_the_chance_bar_is_wilsons_and_perplexity_means_are_geometric():
    from statsmodels.stats.proportion import proportion_confint

    for n in (200, 500):
        k = round(early_tables.chance_threshold(n) * n / 100)
        assert (
            proportion_confint(k, n, method="wilson")[0]
            > 0.5
            >= proportion_confint(k - 1, n, method="wilson")[0]
        )
    assert early_tables.chance_threshold(200) == pytest.approx(57.0) and early_tables.chance_threshold(
        500
    ) == pytest.approx(54.4)
    rows = [
        {
            "part": "lm",
            "group": "lm",
            "task": "lm",
            "scorer": sc,
            "arch": "small",
            "train_sigma": 1.0,
            "seed": s,
            "evaluation": "lm",
            "step": 10,
            "method": "stream",
            "item": "heldout",
            "metric": "perplexity",
            "n": 99,
            "value": v,
        }
        for sc, vals in (("softmax", (10.0, 1000.0)), ("ssa", (100.0, 100.0)))
        for s, v in enumerate(vals)
    ]
    t = early_tables.perplexity_table(pd.DataFrame(rows)).iloc[0]
    assert t["softmax"].startswith("100.0 (10.0–1000.0, 2)") and t["ssa"].startswith("100.0 (")


def test_the_findings_digest_files_every_claim_under_its_verdict():
    """Each claim appears once, under its claim verdict (the claims table's rule), with its judged
    contrasts' estimates; an underpowered claim says how many seeds its effects would need; a claim whose
    contrasts are all not judged is listed as not testable, without estimates; perplexity ratios near 1
    keep a third decimal."""
    claims = [
        paired.Claim("w", "Claim W", "p"),
        paired.Claim("u", "Claim U", "p"),
        paired.Claim("n", "Claim N", "p"),
        paired.Claim("r", "Claim R", "p"),
    ]
    row = dict(
        n_seeds=7,
        scale="identity",
        margin=2.0,
        p_holm=0.5,
        effect_size=0.5,
        family="f",
        family_k=1,
        per_seed=(0.5, -0.5, 1.0, 0.2, 0.1, 0.9, -0.3),
        p_value=0.5,
        claimed_sign=1,
    )
    table = pd.DataFrame(
        [
            {
                **row,
                "claim": "w",
                "contrast": "b − a, x",
                "estimate": 0.3,
                "low": -0.5,
                "high": 0.9,
                "verdict": stats.WITHIN,
            },
            {
                **row,
                "claim": "u",
                "contrast": "b − a, y",
                "estimate": 2.0,
                "low": 0.4,
                "high": 3.7,
                "verdict": stats.UNDERPOWERED,
            },
            {
                **row,
                "claim": "u",
                "contrast": "b − a, z",
                "estimate": 0.1,
                "low": -0.2,
                "high": 0.3,
                "verdict": stats.WITHIN,
            },
            {
                **row,
                "claim": "n",
                "contrast": "b − a, q",
                "estimate": 0.7,
                "low": -1,
                "high": 2,
                "verdict": paired.NOT_LEARNED,
            },
            {
                **row,
                "claim": "r",
                "contrast": "b − a, ppl",
                "estimate": math.log(1.0004),
                "low": math.log(0.998),
                "high": math.log(1.002),
                "scale": "log",
                "n_seeds": 3,
                "verdict": stats.WITHIN,
            },
        ]
    )
    lines = early.verdict_digest(claims, table)
    within, under, untestable = lines
    assert (
        within.startswith("- **Not detected, within the margin")
        and "*Claim W*" in within
        and "*Claim R*" in within
    )
    assert "b − a, x +0.3 [-0.5, +0.9]; 7 seeds" in within
    assert "×1.000 [×0.998, ×1.002]; 3 seeds" in within
    assert (
        "*Claim U* (b − a, y +2 [+0.4, +3.7]; b − a, z +0.1 [-0.2, +0.3]; 7 seeds) — seeds for 80% power:"
        in under
    )
    assert untestable == "- **Not testable at this size (neither arm scores above chance)**: *Claim N*."
    assert sum(line.count("*Claim ") for line in lines) == 4
