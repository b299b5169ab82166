"""Every option composes and validates; typos and bad values fail with the key, value and choices named."""

from __future__ import annotations

import shutil

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from ssa_repro.cli.arguments import config_groups
from ssa_repro.jobs.prepared import PreparedRun as check_run
from ssa_repro.jobs.prepared import problems
from ssa_repro.models import MODELS
from ssa_repro.scorers import SCORERS
from ssa_repro.tasks import TASKS
from ssa_repro.training.validate import ConfigError
from tests.conftest import CONF, HAVE_SHARED_DATA, ROOT, SHARED_DATA, make_cfg, run_script

GROUPS = sorted(
    p.name for p in CONF.iterdir() if p.is_dir() and p.name not in ("local", "eval", "study")
)  # eval: evaluate.yaml's group; study: scripts/study.py's matrices (tests/test_study.py)
OPTIONS = [(g, f.stem) for g in GROUPS for f in sorted((CONF / g).glob("*.yaml"))]


def test_groups_present():
    assert {"task", "model", "scorer", "train", "curriculum", "evaluation", "logger", "experiment"} <= set(
        GROUPS
    )


# corpus tasks need a token model: their usual company on the command line
# (the encoder is bidirectional: a next-token task such as the default linear one is refused with it)
COMPANY = {
    ("task", "lm"): ["experiment=lm_small"],
    ("task", "mlm"): ["model=encoder"],
    ("model", "encoder"): ["task=mlm"],
}


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes_and_validates(group, option):
    cfg = make_cfg(f"{group}={option}", *COMPANY.get((group, option), []), tiny=False)
    if cfg.task.name in ("lm", "mlm") and not HAVE_SHARED_DATA:
        pytest.skip(f"task={cfg.task.name} reads the offline data, not at {SHARED_DATA} (set SSA_DATA_ROOT)")
    assert problems(cfg) == []  # no problems in any shipped option
    if group in ("task", "model"):
        assert cfg[group].name == option
    if group == "scorer":  # presets (ssa_n2, ...) share a registered name and keep their own label
        assert cfg.scorer.label == option and cfg.scorer.name in SCORERS


def test_registered_names_match_config_options():
    # each registry entry has a YAML option and vice versa, and glob(*) sweeps see only real options
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        for group, registry in (("task", TASKS), ("model", MODELS)):
            assert sorted(loader.get_group_options(group)) == registry.names()
        # every registered scorer has an option of its own name; other options are presets of one
        assert set(SCORERS.names()) <= set(loader.get_group_options("scorer"))


def test_experiment_holds_the_paper_settings():
    for task in ("linear", "every", "some"):
        cfg = make_cfg(f"experiment=paper_{task}", tiny=False)
        assert cfg.task.name == task
        assert (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) == (12, 8, 256)
        assert (cfg.train.steps, cfg.train.batch_size, cfg.train.lr) == (500_000, 64, 1e-4)
        c = cfg.curriculum
        assert (c.enabled, c.start, c.end, c.inc, c.interval) == (True, 11, 41, 2, 2000)


# What tests/conftest.py passed as overrides before conf/debug/tiny.yaml held them.
TINY_OVERRIDES = [
    "model.n_layer=1",
    "model.n_head=2",
    "model.n_embd=16",
    "model.max_positions=64",
    "train.steps=6",
    "train.batch_size=8",
    "train.log_interval=2",
    "train.ckpt_interval=3",
    "curriculum.start=3",
    "curriculum.end=5",
    "curriculum.inc=1",
    "curriculum.interval=2",
    "evaluation.n_samples=1",
    "evaluation.batch_size=8",
    "evaluation.sigmas=[1.0,2.0]",
    "evaluation.lengths=[5,10]",
    "logger.mode=disabled",
]


@pytest.mark.parametrize(
    "extra", [[], ["experiment=paper_every"], ["task=lm"], ["model=encoder", "task=mlm"]]
)
def test_debug_tiny_is_the_tests_tiny_run_and_wins_over_experiments(extra):
    """debug=tiny (composed last) gives what the override list gave, on top of any experiment or task
    (the tests' TINY adds evaluation.figures=false: conftest.py)."""
    assert make_cfg(*extra) == make_cfg(*extra, *TINY_OVERRIDES, "evaluation.figures=false", tiny=False)
    assert make_cfg(*extra, "train.steps=9").train.steps == 9  # the command line still wins


def test_default_composition():
    cfg = make_cfg(tiny=False)
    assert (cfg.task.name, cfg.model.name, cfg.scorer.name) == ("linear", "gpt2", "softmax")
    assert cfg.train.batch_size == 64 and cfg.train.lr == 1e-4
    assert cfg.logger.mode.value in ("offline", "disabled")  # conftest sets WANDB_MODE for tests


def test_logger_mode_honours_env(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert make_cfg().logger.mode.value == "disabled"  # an explicit override wins (TINY sets it)
    assert make_cfg(tiny=False).logger.mode.value == "offline"
    monkeypatch.delenv("WANDB_MODE")
    assert make_cfg(tiny=False).logger.mode.value == "offline"


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        ("task.foo=1", ["foo", "LinearTaskConfig"]),
        ("model.n_layers=2", ["n_layers", "ModelConfig"]),
        ("scorer.b_int=2", ["b_int", "SoftmaxConfig"]),
    ],
)
def test_typo_key_fails_at_compose(override, needles):
    with pytest.raises((ConfigCompositionException, ConfigKeyError)) as e:
        make_cfg(override)
    text = str(e.value) + str(e.value.__cause__)
    assert all(n in text for n in needles), text


@pytest.mark.parametrize(
    ("overrides", "needles"),
    [
        (["task=every", "task.supervise=alll"], ["alll", "all, last"]),
        (["device=gpu"], ["gpu", "auto, cpu, cuda"]),
        (["task.x_dist.kind=gaussian"], ["gaussian", "normal, uniform"]),
        (["logger.mode=onlin"], ["onlin", "offline, online, disabled"]),
        (["train.steps=many"], ["many", "steps"]),
    ],
)
def test_bad_enum_or_type_fails_at_compose(overrides, needles):
    with pytest.raises((ConfigCompositionException, ValidationError)) as e:
        make_cfg(*overrides)
    text = str(e.value) + str(e.value.__cause__)
    assert all(n in text for n in needles), text


def test_unknown_option_lists_choices():
    with pytest.raises(MissingConfigException) as e:
        make_cfg("scorer=ssaa")
    assert "softmax" in str(e.value) and "ssa" in str(e.value)


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["task.x_dist.std=0"], "task.x_dist.std=0.0 must be > 0"),
        (["task.a_dist.std=-1"], "task.a_dist.std=-1.0 must be > 0"),
        (["task.x_dist.kind=uniform", "task.x_dist.low=1", "task.x_dist.high=1"], "low < high"),
        (["curriculum.end=40", "model.max_positions=64"], "curriculum.end=40 examples need 80 tokens"),
        (["task=every", "evaluation.lengths=[5,100]"], "evaluation.lengths [100] need up to 200 tokens"),
        (["model.n_head=3"], "model.n_head=3 must divide model.n_embd=16"),
        (["scorer=ssa", "scorer.n_init=0.5"], "scorer.n_init=0.5 must be >= 1"),
        (["scorer=ssa", "scorer.b_init=0"], "scorer.b_init=0.0 must be > 0"),
        (["scorer=ssa", "scorer.n_init=1"], "learn_n"),
        (["curriculum.start=9", "curriculum.end=5"], "curriculum.start=9 must be <= curriculum.end=5"),
        (["train.lr=0"], "train.lr=0.0 must be > 0"),
        (["train.batch_size=0"], "train.batch_size=0 must be >= 1"),
        (["evaluation.sigmas=[1,-2]"], "evaluation.sigmas"),
        (["task=every", "task.balance=true", "task.x_dist.mean=1"], "symmetric"),
        (
            ["task.name=linearr"],
            "allowed: copy, counting, decision_tree, every, flip_flop, linear, linear_regression, lm, mlm, mqar, noisy_linear, polynomial, quadratic, relu_2nn, some, sparse_linear",
        ),
        (["train.keep_every=4", "train.ckpt_interval=3"], "multiple of train.ckpt_interval=3"),
        (["evaluation.sigmas=[]"], "evaluation.sigmas=[] must be a non-empty list"),
        (["task=some", "evaluation.lengths=[]"], "evaluation.lengths=[] must be a non-empty list"),
        (["evaluation.skip_first=-1"], "evaluation.skip_first=-1 must be >= 0"),
        (
            ["evaluation.lengths=[3,8]"],
            "evaluation.skip_first=3 must be < the shortest of evaluation.lengths",
        ),
        (["evaluation.also=[deviant,bogus]"], "evaluation.also has ['bogus']; allowed:"),
        (
            ["+model.n_layers=2"],
            "model.n_layers is not a key of model (ModelConfig); valid keys: name, n_layer",
        ),
    ],
)
def test_startup_checks_name_key_and_value(overrides, needle):
    cfg = make_cfg(*overrides)
    found = problems(cfg)
    assert any(needle in p for p in found), found
    with pytest.raises(ConfigError):
        check_run(cfg, ROOT / "outputs" / "no-such-run")


FINITE = "must be a finite number in float32's range"


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["train.lr=inf"], f"train.lr=inf {FINITE}"),
        (["train.lr=nan"], f"train.lr=nan {FINITE}"),
        (["scorer=ssa", "scorer.n_init=inf"], f"scorer.n_init=inf {FINITE}"),
        (["task.x_dist.std=inf"], f"task.x_dist.std=inf {FINITE}"),
        (["task=every", "task.x_dist.mean=-inf"], f"task.x_dist.mean=-inf {FINITE}"),
        (["scorer=ssa", "scorer.b_init=1e40"], f"scorer.b_init=1e+40 {FINITE}"),  # inf in float32
        (["scorer=ssa", "scorer.b_init=1e35"], "scorer.b_init=1e+35 must be <= 1e30"),
        (["scorer=ssa", "scorer.param=exp", "scorer.n_init=1e31"], "scorer.n_init=1e+31 must be <= 1e30"),
        (["task.a_dist.std=1e7"], "task.a_dist.std=10000000.0 must be in [-1e6, 1e6]"),
        (["train.betas=[0.9,inf]"], f"train.betas[1]=inf {FINITE}"),
        (["evaluation.sigmas=[1,inf]"], f"evaluation.sigmas[1]=inf {FINITE}"),
        (["scorer=temperature", "scorer.tau=inf"], f"scorer.tau=inf {FINITE}"),
    ],
)
def test_non_finite_and_overflowing_numbers_are_refused_before_work(overrides, needle):
    """Each of these passed validation once and failed at step 1-2, after the run folder was made."""
    found = problems(make_cfg(*overrides))
    assert any(needle in p for p in found), found
    key = needle.split("=")[0].split("[")[0]
    assert len([p for p in found if p.startswith(key)]) == 1, found  # said once


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("model.vocab_size=-1", "model.vocab_size=-1 must be >= 0 (0: scalar tokens)"),
        ("train.steps=-1", "train.steps=-1 must be >= 0"),
        ("train.grad_accum=0", "train.grad_accum=0 must be >= 1"),
        ("train.min_lr_ratio=2", "train.min_lr_ratio=2.0 must be in [0, 1]"),
        ("train.betas=[0.9]", "train.betas=[0.9] must be two values in [0, 1)"),
        ("train.betas=[0.9,1.0]", "train.betas=[0.9, 1.0] must be two values in [0, 1)"),
        ("train.compile=maybe", "train.compile='maybe' must be one of auto, true, false, reduce-overhead"),
        ("train.keep_every=-1", "train.keep_every=-1 must be >= 0 (0: keep only last.pt)"),
        ("curriculum.inc=-1", "curriculum.inc=-1 must be >= 0"),
        ("curriculum.interval=0", "curriculum.interval=0 must be >= 1"),
    ],
)
def test_rule_table_names_key_value_and_what_is_allowed(override, needle):
    assert needle in problems(make_cfg(override))


def test_all_problems_reported_at_once():
    found = problems(make_cfg("task.x_dist.std=0", "model.n_head=3", "train.lr=-1"))
    assert len(found) == 3, found


def test_cuda_requested_but_absent():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert any("device=cuda" in p for p in problems(make_cfg("device=cuda")))


@pytest.mark.slow
def test_bad_value_on_command_line_leaves_run_folder_untouched(tmp_path):
    run = tmp_path / "existing_run"
    run.mkdir()
    (run / "marker.txt").write_text("keep")
    proc = run_script("train.py", "model.n_head=3", f"hydra.run.dir={run}", "logger.mode=disabled")
    assert proc.returncode != 0
    assert "model.n_head=3 must divide model.n_embd=64" in proc.stderr + proc.stdout
    assert sorted(p.name for p in run.iterdir()) == ["marker.txt"]  # Hydra wrote nothing there


def test_the_end_of_run_grid_must_fit_the_model():
    # the linear quick grid is at 20 examples (40 tokens): a shorter model says which key to change
    found = problems(make_cfg("model.max_positions=12", "curriculum.end=5", "evaluation.lengths=null"))
    assert found == [
        "evaluation.lengths [20] need up to 40 tokens, more than model.max_positions=12 (the table of "
        "model.pos=learned); raise model.max_positions or use a scheme without a table "
        "(model.pos=alibi|none|rope|sinusoidal|t5)"
    ]
    # a scheme without a table takes the grid at any length
    assert problems(make_cfg("model.max_positions=12", "curriculum.end=5", "model.pos=rope")) == []
    assert problems(make_cfg("model.max_positions=12", "curriculum.end=5", "evaluation.lengths=[5]")) == []
    assert problems(make_cfg("model.max_positions=12", "curriculum.end=5", "evaluation=off")) == []


@pytest.mark.slow
def test_multirun_checks_every_job_before_the_first_starts(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_script(
        "train.py",
        "-m",
        "model.n_head=2,3",
        "model.n_embd=16",
        "model.n_layer=1",
        "train.steps=2",
        f"hydra.sweep.dir={sweep}",
        "logger.mode=disabled",
    )
    assert proc.returncode != 0
    assert "model.n_head=3 must divide model.n_embd=16" in proc.stderr + proc.stdout
    assert not sweep.exists()  # not even job 0 ran


@pytest.mark.slow
def test_multirun_jobs_get_their_own_folders_and_one_wandb_group(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_script(
        "train.py",
        "-m",
        "scorer=softmax,ssa",
        "model.n_embd=16",
        "model.n_layer=1",
        "model.n_head=2",
        "train.steps=2",
        "evaluation.enabled=false",
        f"hydra.sweep.dir={sweep}",
        "logger.mode=disabled",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == [  # named by the overridden keys (Hydra writes booleans back as False)
        "scorer=softmax,evaluation.enabled=False,model.n_embd=16,model.n_head=2,model.n_layer=1,train.steps=2,seed=0",
        "scorer=ssa,evaluation.enabled=False,model.n_embd=16,model.n_head=2,model.n_layer=1,train.steps=2,seed=0",
    ]
    for job in jobs:  # the sweep is the W&B group of each job (recorded in the job's resolved config)
        assert OmegaConf.load(sweep / job / "config.yaml").logger.group == "sweep"


@pytest.mark.parametrize(
    "bidirectional", [["model=encoder"], ["model.causal=false"], ["model=encoder", "task=mlm"]]
)
def test_a_causal_only_scorer_is_refused_for_a_bidirectional_model(tmp_path, bidirectional):
    cfg = make_cfg("scorer=stickbreaking", *bidirectional)
    found = [p for p in problems(cfg) if "scorer=stickbreaking is causal only" in p]
    assert len(found) == 1 and "model.causal=false" in found[0], problems(cfg)
    allowed = found[0].split("allows a bidirectional one: ")[1].split(", ")
    assert "softmax" in allowed and "ssa" in allowed and "stickbreaking" not in allowed
    with pytest.raises(ConfigError, match="causal only"):  # refused before the run folder exists
        check_run(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert problems(make_cfg("scorer=stickbreaking")) == []  # the default decoder is causal
    assert not any("causal only" in p for p in problems(make_cfg("scorer=ssa", *bidirectional)))


@pytest.mark.parametrize(
    ("n_embd", "n_head", "odd"), [(12, 4, True), (20, 4, True), (16, 4, False), (24, 4, False)]
)
def test_diff_needs_an_even_head_width(tmp_path, n_embd, n_head, odd):
    cfg = make_cfg("scorer=diff", f"model.n_embd={n_embd}", f"model.n_head={n_head}")
    if not odd:
        assert problems(cfg) == []
        return
    needle = f"scorer=diff splits each head in two halves, so the head width model.n_embd / model.n_head = {n_embd // n_head} must be even"
    assert any(needle in p for p in problems(cfg)), problems(cfg)
    with pytest.raises(ConfigError, match="must be even"):  # refused before the run folder exists
        check_run(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    # the same width with a scorer that does not split heads is fine
    assert problems(make_cfg("scorer=softmax", f"model.n_embd={n_embd}", f"model.n_head={n_head}")) == []


def test_help_lists_each_entry_points_own_groups(tmp_path):
    """``--help`` lists the groups an entry point composes, with their options read from conf/ (a new
    option file appears at once), not evaluate.py's ``eval`` in train.py's, the study matrices or schemas."""
    train = dict(line.split(": ", 1) for line in config_groups("train").splitlines())
    assert {"model", "scorer", "task", "evaluation", "sweep/size", "debug"} <= set(train)
    assert not {"eval", "study"} & set(train) and not any(g.startswith("schema") for g in train)
    assert [o.rstrip("*") for o in train["curriculum"].split(", ")] == sorted(
        p.stem for p in (CONF / "curriculum").glob("*.yaml")
    )
    # the default of each group is marked (conf/train.yaml's defaults list), and only it
    assert [o for o in train["scorer"].split(", ") if o.endswith("*")] == ["softmax*"]
    assert [o for o in train["curriculum"].split(", ") if o.endswith("*")] == ["default*"]
    assert not [o for o in train["sweep"].split(", ") if o.endswith("*")]  # sweep: null
    evaluate = dict(line.split(": ", 1) for line in config_groups("evaluate").splitlines())
    assert list(evaluate) == ["eval"] and {"shift", "default*"} <= set(evaluate["eval"].split(", "))
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "curriculum" / "steep.yaml").write_text("start: 3\n")
    assert (
        "steep"
        in dict(line.split(": ", 1) for line in config_groups("train", conf).splitlines())["curriculum"]
    )


# compose_cached splits the overrides as Hydra does (config-group choices, then values applied in order):
# the cases where the split or the order could differ from Hydra's own compose
TRICKY = [
    ["train.steps=9", "task=every", "scorer=ssa"],  # a value before the group choices
    ["experiment=paper_linear", "model.n_layer=2"],  # a value over an experiment's (package _global_)
    ["debug=tiny", "train.steps=3", "train.steps=4"],  # the same key twice: the last wins
    ["++train.steps=5", "+task.extra=1"],  # force-add over a key; add to a task config
    ["~evaluation.also"],  # a deletion (refused by the typed schema: refused alike)
    ["train.lr=${train.weight_decay}"],  # an interpolation
    ["evaluation.sigmas=[1,2,5]", "logger.tags=[a,b]"],  # lists
    ["train={steps: 7, lr: 0.01}"],  # a dict value
    ["hydra.run.dir=/x", "hydra/launcher=joblib", "seed=4"],  # Hydra's own keys and groups
    ["model=encoder", "task=mlm", "model.pos=rope"],  # a value key under a group's name
    ["model=encoder", "task=mlm", "+model.pos=rope"],  # an add over an existing key: refused alike
    ["scorer=ssa_n2", "scorer.n_init=1.5"],  # a preset, then its value
    ["scorer=ssa", "~train.keep_at", "seed=2"],  # a deletion among values (Hydra's own second step)
    ["~train.keep_at=[1]"],  # a deletion whose value differs: refused alike
]


@pytest.mark.parametrize("overrides", TRICKY, ids=["|".join(t) for t in TRICKY])
def test_compose_cached_is_hydras_compose_value_for_value(overrides, monkeypatch):
    from hydra import compose

    from ssa_repro.config import compose_cached

    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            want = compose("train", overrides=overrides)
    except ConfigCompositionException as e:  # refused: refused alike, with the same message
        with pytest.raises(ConfigCompositionException) as got:
            compose_cached(overrides)
        assert str(got.value) == str(e) and str(got.value.__cause__) == str(e.__cause__)
        return
    import ssa_repro.config as config

    calls = []  # what reaches Hydra's compose: the group choices (and hydra.*), never a value override
    monkeypatch.setattr(
        config, "compose", lambda name, overrides: calls.append(overrides) or compose(name, overrides)
    )
    got = compose_cached(overrides)
    assert OmegaConf.to_yaml(got) == OmegaConf.to_yaml(want)
    assert OmegaConf.to_container(got, resolve=True) == OmegaConf.to_container(want, resolve=True)
    assert OmegaConf.is_struct(got) == OmegaConf.is_struct(want)
    groups = {"task", "scorer", "experiment", "debug", "model", "hydra/launcher"}
    values = [
        o for o in overrides if o.split("=")[0].lstrip("+") not in groups and not o.startswith("hydra.")
    ]
    assert not [o for c in calls for o in c if o in values], calls


@pytest.mark.parametrize("bad", [["train.stpes=3"], ["+train.steps=3"], ["~train.nope"], ["seed=0,1"]])
def test_compose_cached_refuses_what_compose_refuses_with_its_message(bad):
    from hydra import compose

    from ssa_repro.config import compose_cached

    with pytest.raises(ConfigCompositionException) as want:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            compose("train", overrides=bad)
    with pytest.raises(ConfigCompositionException) as got:
        compose_cached(bad)
    assert str(got.value) == str(want.value)
