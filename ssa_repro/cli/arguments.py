"""The command lines of the ``ssa-*`` commands, read before anything heavy loads.

Every parser here is argparse and the standard library only (PyYAML for the config groups), so
``--help`` and a wrong argument answer at once, before torch, pandas and seaborn (about 5 s of imports
on a 2-core machine) load with the command's work, which :mod:`ssa_repro.cli.commands` loads by name
after the arguments are read. ``train.py``/``evaluate.py`` are Hydra apps: their ``--help``
(:func:`hydra_help`) lists the config groups from conf/ as the files stand, and points to ``--cfg job``
for the composed config (composing it needs the schemas, which need torch). Choices that a deeper module
owns (Zorro's scoring methods, the study's ensemble modes) are restated here and checked equal by
tests/test_cli_feel.py.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import yaml

CONF = Path(__file__).resolve().parents[2] / "conf"
HELP_FLAGS = ("--help", "-h")  # Hydra's --hydra-help, --info, --cfg stay Hydra's
ZORRO_METHODS = ("pll", "holistic")  # ssa_repro/evaluation/zorro.py METHODS
ENSEMBLE_MODES = ("auto", "on", "off")  # ssa_repro/studies/engine.py ENSEMBLE_MODES
DASHBOARD_TIMEOUT = 60.0  # seconds for each W&B server step: wandb itself retries errors for hours
PUBLISHED = Path("docs") / "results"  # where ssa-study --publish writes: the committed reports


def _parser(prog: str, description: str, epilog: str | None = None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter if epilog else argparse.HelpFormatter,
    )


def compare() -> argparse.ArgumentParser:
    p = _parser(
        "ssa-compare",
        "Compare stored evaluation results of run folders, or of every job in a sweep folder: "
        "side-by-side heat maps on one colour scale, a difference map against a baseline, a summary table "
        "with seed intervals. A sweep is grouped by its overridden keys except seed; jobs without results "
        "are listed and left out. LM and masked-LM runs get their own tables (ssa-lm-table, "
        "ssa-zorro-table).",
    )
    p.add_argument("paths", nargs="+", help="run folders, or one sweep folder (outputs/multirun/<name>)")
    p.add_argument(
        "--eval",
        default="auto",
        help="auto (default: the task's paper protocol if every run has it, else the end-of-run quick one), "
        "default, quick, an evaluation name (grid, deviant) or a protocol id",
    )
    p.add_argument("--metric", default=None, help="default: the task's headline metric (mse, sequence_error)")
    p.add_argument("--out", default=None, help="output folder (default: <sweep>/compare, or beside the runs)")
    p.add_argument(
        "--baseline", default=None, help="label (or scorer) the difference map subtracts; default softmax"
    )
    p.add_argument(
        "--difference",
        default="auto",
        choices=["auto", "diff", "log10_ratio"],
        help="the difference map: diff (mean − baseline's mean), log10_ratio (log10 of their ratio), auto "
        "(default: log10_ratio for metrics on a log scale such as MSE, else diff)",
    )
    p.add_argument(
        "--group-by", default=None, help="for run lists: config keys whose runs are averaged as seeds"
    )
    p.add_argument(
        "--at",
        default=None,
        help="key=value of a coordinate that is not an axis (e.g. length=40): the slice to compare",
    )
    return p


STUDY_EXAMPLES = """\
examples:
  ssa-study icl_cpu                 train and evaluate every job (resumes), then the report
  ssa-study icl_cpu --report-only   the report from what is stored
  ssa-study quick                   the same pipeline on tiny settings (about a minute)
  ssa-study icl_cpu --jobs 14 --set device=cpu      a many-core machine, CPU only
  ssa-study early_cpu --groups curves_mlm           some groups only (the others' results kept)
  ssa-study early_cpu --groups mlm --continue-from docs/results/early_cpu --dry-run
                                    what that would run, per setting: seeds, finished, left to train
  ssa-study early_cpu --groups mlm --seeds 24-36 --root outputs/study/early_b
                                    some seeds only: a second core or machine takes the matrix's end
  ssa-study icl_cpu --groups architecture --tasks every_num   and some tasks only
  ssa-study icl_cpu --report-only --publish         the committed report, docs/results/icl_cpu.md
  ssa-study icl_cpu --report-only --from-csv docs/results/icl_cpu --publish
                                    the committed report regenerated from its per-seed CSVs alone
  ssa-study icl_cpu --continue-from docs/results/icl_cpu --publish
                                    a later session adds seeds: the published jobs are not trained
                                    again, and the report joins their rows with the new runs'

The matrix is conf/study/<name>.yaml (or a path to a study file), checked against its schema
(ssa_repro/studies/schema.py) before anything runs. Runs go to outputs/study/<name>/ (--root); the
report, <name>.md with its figures, goes there too (--out DIR elsewhere; --publish: docs/results/).
The same command as python scripts/study.py. See docs/studies.md."""


def study() -> argparse.ArgumentParser:
    p = _parser(
        "ssa-study",
        "Run a study (a matrix of training jobs, each evaluated) and write its report; an interrupted "
        "study resumes where it stopped when the same command is run again.",
        STUDY_EXAMPLES,
    )
    p.add_argument("name", help="conf/study/<name>.yaml, or a path to a study file (.yaml)")
    p.add_argument("--root", default=None, help="where the runs go (default: outputs/study/<name>)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", default=None, help="where the report goes (default: the study's --root)")
    where.add_argument(
        "--publish", action="store_true", help=f"write the report into {PUBLISHED} (the committed reports)"
    )
    p.add_argument(
        "--jobs", type=int, default=2, help="jobs at a time (processes; threads split between them)"
    )
    p.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for every job (e.g. device=cpu)"
    )
    p.add_argument("--report-only", action="store_true", help="only write the report from stored results")
    p.add_argument(
        "--dry-run",
        "-n",
        action="store_true",
        help="list the jobs the same command would run (per setting: seeds, finished, to evaluate, to train), "
        "check their configs, and write nothing",
    )
    p.add_argument(
        "--from-csv",
        default=None,
        metavar="DIR",
        help="with --report-only: the report from the per-seed CSVs and report_inputs.json in DIR (e.g. "
        "docs/results/<name>) instead of the run folders",
    )
    p.add_argument(
        "--continue-from",
        default=None,
        metavar="DIR",
        help="continue a published study (its run folders gone, e.g. in a later session): the jobs whose "
        "rows DIR's per-seed CSVs hold (e.g. docs/results/<name>) are not trained again, and the report "
        "joins those rows with the new runs'",
    )
    p.add_argument(
        "--ensembles",
        choices=ENSEMBLE_MODES,
        default="auto",
        help="train the jobs that differ only in the seed as seed ensembles, one stacked model per group "
        "(auto: on CUDA, where small models are launch-bound; on: also on a CPU, where it gains nothing)",
    )
    p.add_argument(
        "--groups", nargs="*", default=None, metavar="GROUP", help="run only these groups (default: all)"
    )
    p.add_argument(
        "--tasks",
        nargs="*",
        default=None,
        metavar="TASK",
        help="run only these of the study's tasks (e.g. every_num: a headline first; default: all)",
    )
    p.add_argument(
        "--seeds",
        nargs="*",
        default=None,
        type=seed_spec,
        metavar="SEED",
        help="run only these seeds: integers or inclusive ranges such as 24-36 (two machines or cores "
        "split a matrix, each into its own --root; default: all)",
    )
    return p


def seed_spec(text: str) -> list[int]:
    """``--seeds`` item: ``7`` -> [7], ``24-36`` -> [24, ..., 36] (inclusive, low-high)."""
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", text.strip())
    if not m or (m[2] is not None and int(m[2]) < int(m[1])):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a seed; allowed: a non-negative integer (7) or an inclusive range low-high (24-36)"
        )
    return list(range(int(m[1]), int(m[2] or m[1]) + 1))


def stats_table() -> argparse.ArgumentParser:
    p = _parser(
        "ssa-stats-table",
        "The decision rule's simulated error rates, the bootstrap's coverage and the power for the study's "
        "effect sizes, as the markdown tables of docs/statistics.md: printed, and with --write put between "
        "that page's BEGIN/END stats_table.py markers. Seeded: the same command gives the same numbers "
        "(about a minute and a half on one CPU core).",
    )
    p.add_argument("--write", default=None, help="a markdown page whose BEGIN/END block to replace")
    p.add_argument("--n-sim", type=int, default=2000, help="replications per row (default 2000)")
    return p


def zorro_table() -> argparse.ArgumentParser:
    p = _parser(
        "ssa-zorro-table",
        "The paper's table 3 from Zorro results: reads the stored eval=zorro results of every task=mlm run "
        "under each folder (python evaluate.py run_dir=... eval=zorro stores them), aggregates seeds per "
        "scorer (mean, sd, count) and writes zorro_table.csv, zorro_table.md and zorro_table.png/.pdf "
        "(grouped bars, the paper's 12 probes highlighted) into --out.",
    )
    p.add_argument("paths", nargs="+", help="run folders or sweep folders (searched recursively)")
    p.add_argument("--method", default="pll", choices=ZORRO_METHODS, help="Zorro score (default: pll)")
    p.add_argument(
        "--out",
        default=None,
        help="output folder (default: the first path when it is a sweep, else zorro_table/ beside that run)",
    )
    return p


DOCS_TABLES = ("scorers",)  # ssa_repro/cli/docs_tables.py TABLES


def docs_tables() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scripts/docs_tables.py",
        description="The docs' component tables, generated from the registries (between a page's "
        "'<!-- generated: NAME -->' and '<!-- end generated -->' lines).",
    )
    p.add_argument("tables", nargs="*", help=f"of {', '.join(DOCS_TABLES)} (default: all)")
    p.add_argument("--check", action="store_true", help="exit 1 naming each page whose table is stale")
    return p


SCORER_REPORT_HEADS = 8  # the paper's heads per layer (ssa_repro/cli/scorer_report.py N_HEAD)


def scorer_report() -> argparse.ArgumentParser:
    p = _parser(
        "scripts/scorer_report.py",
        "Scorer report: saturation, SSA's base function and cost of every scorer option, against "
        "docs/scorers.md (ssa_repro/cli/scorer_report.py says what each output holds).",
        epilog="  python scripts/scorer_report.py                         # writes outputs/scorer_report/\n"
        "  python scripts/scorer_report.py --out DIR --reps 30\n"
        "  python scripts/scorer_report.py --reps 1 --cost-shape 2 8 8 8   # a quick smoke run",
    )
    p.add_argument("--out", type=Path, default=Path("outputs/scorer_report"), help="output folder")
    p.add_argument(
        "--reps", type=int, default=15, help="timed reps per variant (default 15: ~25 s in all on 2 cores)"
    )
    p.add_argument(
        "--cost-shape",
        type=int,
        nargs=4,
        default=[64, SCORER_REPORT_HEADS, 80, 32],
        metavar=("B", "H", "T", "D"),
        help="q, k, v shape [B, H, T, d_head] for the cost table",
    )
    return p


def lm_table() -> argparse.ArgumentParser:
    p = _parser(
        "ssa-lm-table",
        "The paper's table 2 from LM results: reads the stored eval=lm results of every task=lm run under "
        "each folder (python evaluate.py run_dir=... eval=lm stores them) and writes lm_table.csv and "
        "lm_table.md into --out: perplexities, then each task's accuracy ± standard error, one column per "
        "run (labelled by scorer) and number of shots.",
    )
    p.add_argument("paths", nargs="+", help="run folders or sweep folders (searched recursively)")
    p.add_argument("--out", default=None, help="output folder (default: the first path)")
    return p


def wandb_dashboard() -> argparse.ArgumentParser:
    p = _parser(
        "ssa-wandb-dashboard",
        "Create a W&B workspace comparing softmax and SSA for one sweep (a W&B group): the runs table "
        "grouped by scorer, heat maps and their difference, SSA's b and n, training curves. Online only; "
        "needs the dashboard extra (pip install -e '.[dashboard]').",
    )
    p.add_argument("path", help="entity/project")
    p.add_argument("group", help="the sweep's W&B group (its folder name)")
    p.add_argument("--eval", default="quick", help="evaluation whose grid is shown (default: quick)")
    p.add_argument(
        "--rows", default="sigma_x", help="the heat maps' row axis, a grid column (default: sigma_x)"
    )
    p.add_argument("--cols", default="length", help="the heat maps' column axis (default: length)")
    p.add_argument("--name", default=None, help="workspace name (default: '<group>: softmax vs SSA')")
    p.add_argument(
        "--timeout",
        type=float,
        default=DASHBOARD_TIMEOUT,
        help="seconds each server step may take before the command stops with an error "
        f"(default: {DASHBOARD_TIMEOUT:g})",
    )
    return p


# ------------------------------------------------------------------------------------- Hydra apps
def config_groups(primary: str, conf_dir: str | Path = CONF) -> str:
    """``group: option, ...`` lines of the groups ``conf/<primary>.yaml``'s defaults list names and their
    subgroups (``sweep/size``), read from conf/ as it is, the default option marked ``*``: an entry
    point's ``--help`` lists its own groups, not another's (evaluate.py's ``eval``, the study matrices)
    nor the schemas."""
    conf = Path(conf_dir)
    defaults = yaml.safe_load((conf / f"{primary}.yaml").read_text())["defaults"]
    chosen = {k: v for d in defaults if isinstance(d, dict) for k, v in d.items()}
    lines = []
    for group in chosen:
        for folder in sorted([conf / group, *(p for p in (conf / group).rglob("*") if p.is_dir())]):
            name = folder.relative_to(conf).as_posix()
            options = [
                f"{o}*" if o == chosen.get(name) else o for o in sorted(p.stem for p in folder.glob("*.yaml"))
            ]
            if options:
                lines.append(f"{name}: {', '.join(options)}")
    return "\n".join(lines)


HYDRA_APPS = {"train": ("ssa-train", "train.py"), "evaluate": ("ssa-evaluate", "evaluate.py")}


def hydra_help(primary: str, conf_dir: str | Path = CONF) -> str:
    """The ``--help`` of ``train.py``/``evaluate.py``: the leading comment of ``conf/<primary>.yaml`` (its
    usage line, then what the command does), its config groups (:func:`config_groups`) and where the keys are.
    Hydra's own help would compose the config first (its group listing alone took 8 s here)."""
    command, script = HYDRA_APPS[primary]
    text = (Path(conf_dir) / f"{primary}.yaml").read_text().splitlines()
    intro = []
    for line in text:
        if not line.startswith("#"):
            break
        intro.append(line[1:].strip())
    return "\n".join(
        [
            f"usage: {intro[0] if intro else 'python ' + script}",
            f"(the same as {command} ...)",
            "",
            *intro[1:],
            "",
            f"  python {script} ... --cfg job      print the composed config and stop",
            f"  python {script} -m key=a,b ...     a sweep (Hydra multirun): one job per combination",
            f"  python {script} --hydra-help       Hydra's own flags",
            "",
            "== Configuration groups ==",
            "Compose your configuration from those groups (group=option; * marks the default)",
            "",
            config_groups(primary, conf_dir),
            "",
            "== Config ==",
            "Override anything in the config (foo.bar=value). The keys, their types and defaults: the",
            f"schemas in ssa_repro/core/schema.py and docs/configuration.md; `python {script} [overrides]",
            "--cfg job` prints the config those overrides compose.",
        ]
    )


def asks_help(argv: list[str]) -> bool:
    """Whether a Hydra app's command line asks for its help (``--help``/``-h``)."""
    return any(a in HELP_FLAGS for a in argv)


BENCH_SIZES = {  # scripts/bench.py --sizes
    "small": dict(name="gpt2", n_layer=4, n_head=4, n_embd=64, max_positions=512, mlp_ratio=4),
    "paper": dict(name="gpt2", n_layer=12, n_head=8, n_embd=256, max_positions=512, mlp_ratio=4),
    # GPT-2 small's backbone (experiment=paper_lm's 12 heads of 64) on the ICL task: its attention at T = 1,024
    "gpt2s": dict(name="gpt2", n_layer=12, n_head=12, n_embd=768, max_positions=1024, mlp_ratio=4),
}


def bench(description: str) -> argparse.ArgumentParser:
    """scripts/bench.py's arguments (answered before torch loads); ``description``: the script's docstring."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs="+", default=["small", "paper"], choices=sorted(BENCH_SIZES))
    p.add_argument("--scorers", nargs="+", default=["softmax", "ssa"])
    p.add_argument(
        "--reps", type=int, default=None, help="timed steps per variant (default: 30 small, 6 paper)"
    )
    p.add_argument(
        "--pos", nargs="+", default=[], help="also time ours with these model.pos (alibi, rope, t5, ...)"
    )
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--n-points", type=int, default=41)
    p.add_argument("--device", default="cpu")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (what train.precision=bf16 does)")
    p.add_argument(
        "--compile",
        action="store_true",
        help="also time torch.compile'd variants of ours (on CUDA also mode=reduce-overhead: CUDA graphs)",
    )
    p.add_argument(
        "--bf16-rows", action="store_true", help="also time bf16-autocast variants of ours, beside fp32"
    )
    p.add_argument("--no-hf", action="store_true", help="skip the HF GPT2Model reference")
    p.add_argument("--no-eval", action="store_true", help="skip the evaluation throughput")
    p.add_argument("--eval-only", action="store_true", help="only the evaluation throughput (a quick run)")
    p.add_argument(
        "--eval-prompts", type=int, default=256, help="prompts per grid length in the evaluation rows"
    )
    p.add_argument(
        "--eval-paths",
        nargs="+",
        default=["plain", "fused"],
        choices=["plain", "fused", "node"],
        help="inference paths in the evaluation rows (plain: each scorer's own attend; fused: "
        "FlexAttention; node: plain, with SSA through its training node instead of its CPU blocks)",
    )
    p.add_argument(
        "--kernel", action="store_true", help="only the SSA attention paths vs softmax at T = 82, 256, 1024"
    )
    p.add_argument("--no-flex", action="store_true", help="without the FlexAttention rows on CUDA")
    p.add_argument(
        "--torch-node",
        action="store_true",
        help="also time SSA through its torch node (ours-torchnode: ssa_cpu.FUSED off), beside the fused CPU node",
    )
    p.add_argument(
        "--lengths", nargs="+", type=int, default=None, help="--kernel: the lengths T (default 82 256 1024)"
    )
    return p
