"""Run a study and write its report: ``python scripts/study.py icl_cpu`` (or ``quick``, CI's minute-long run).

    python scripts/study.py icl_cpu                 # train and evaluate every job (resumes), then the report
    python scripts/study.py icl_cpu --report-only   # the report from what is stored
    python scripts/study.py quick                   # the same pipeline on tiny settings
    python scripts/study.py icl_cpu --jobs 14 --set device=cpu   # a many-core machine, CPU only
    python scripts/study.py early_cpu --groups curves_mlm       # some groups only (the others' results kept)
    python scripts/study.py icl_cpu --groups architecture --tasks every_num   # and some tasks only

    python scripts/study.py icl_cpu --report-only --publish   # the committed report, docs/results/icl_cpu.md
    python scripts/study.py icl_cpu --report-only --from-csv docs/results/icl_cpu --publish
        # the committed report regenerated from its per-seed CSVs and report_inputs.json alone (no runs)

The matrix is ``conf/study/<name>.yaml`` (or a path to a study file); it is checked against the schema
(ssa_repro/studies/schema.py) before anything runs. Runs go to ``outputs/study/<name>/`` (``--root``),
the report, ``<name>.md`` with its figures beside it, into that folder too (``--out DIR`` elsewhere;
``--publish``: docs/results, where the committed reports are). See ssa_repro/studies/; the report is
the one the study's ``report`` key names (:data:`REPORTS`: ``icl``, the default,
ssa_repro/reports/kinds/icl.py; ``early``, ssa_repro/reports/kinds/early.py).
"""

import argparse
import logging
import sys
from pathlib import Path

from ssa_repro.cli import arguments, commands
from ssa_repro.core.atomic import storage_advice
from ssa_repro.reports import kinds
from ssa_repro.reports.kinds import icl as icl_report
from ssa_repro.studies import engine, study
from ssa_repro.studies import index as study_index

# a study's `report` key -> its kind's writer, its renderer from per-seed CSVs (--from-csv) and the reader of
# those CSVs: the kinds found by scanning reports/kinds/ (dicts here so that tests can replace one)
REPORTS = {n: kinds.get(n).write for n in kinds.REPORTS.names()}
RENDERERS = {n: kinds.get(n).render for n in kinds.REPORTS.names()}
READERS = {n: kinds.get(n).read_back for n in kinds.REPORTS.names()}



def report_of(cfg) -> str:
    """The study's report kind (its ``report`` key; ``icl`` without one), checked against the kinds
    found in reports/kinds/ (:data:`ssa_repro.reports.kinds.REPORTS`)."""
    name = str(cfg.report) if "report" in cfg else kinds.DEFAULT
    if name not in REPORTS:
        raise SystemExit(
            f"Error: study {cfg.name}: report={name!r} is not a report; allowed: {', '.join(REPORTS)}"
        )
    return name


def main(argv: list[str] | None = None) -> int:
    """``ssa-study`` from Python: the command line read as the command reads it (cli/commands.py)."""
    return commands.study(argv)


def run(a: argparse.Namespace) -> int:
    """``ssa-study``'s work on its parsed arguments (ssa_repro/cli/arguments.py ``study``; ``a.argv``: the
    command line, recorded in the report)."""
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    if a.from_csv is not None and not a.report_only:
        raise SystemExit(f"Error: --from-csv {a.from_csv} needs --report-only (it trains nothing)")
    if a.from_csv is not None and not Path(a.from_csv).is_dir():
        raise SystemExit(
            f"Error: --from-csv {a.from_csv} is not a folder; allowed: a report's folder of per-seed CSVs "
            "and report_inputs.json (e.g. docs/results/<name>)"
        )
    if a.continue_from is not None:
        icl_report.load_inputs(
            Path(a.continue_from), "--continue-from"
        )  # a published report's folder, or stop
    if a.from_csv is not None and a.continue_from is not None:
        raise SystemExit(
            "Error: --from-csv and --continue-from exclude each other (--from-csv trains nothing)"
        )
    cfg = study.load(a.name)
    write = REPORTS[report_of(cfg)]
    root = Path(a.root or study.default_root(cfg.name))
    # the selection, the same for a dry run and a run: groups, tasks, seeds, the published jobs left out
    select = dict(
        groups=tuple(a.groups) if a.groups else None,
        tasks=tuple(a.tasks) if a.tasks else None,
        seeds=tuple(sorted({x for item in a.seeds for x in item})) if a.seeds else None,
        skip=icl_report.prior_jobs(Path(a.continue_from), READERS[report_of(cfg)])
        if a.continue_from and not a.report_only
        else frozenset(),
    )
    if a.dry_run:
        if a.report_only:
            raise SystemExit(
                "Error: --dry-run and --report-only exclude each other (--dry-run lists the jobs to run)"
            )
        print(engine.plan(a.name, root, tuple(a.set), **select))
        return 0
    if not a.report_only:
        try:
            engine.run(a.name, root, a.jobs, tuple(a.set), ensembles=a.ensembles, **select)
        except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the workers are stopped (engine.run)
            print(
                f"study {cfg.name} stopped ({e or 'interrupted'}); its workers were stopped. Finished jobs "
                f"are kept: rerun the same command to resume.",
                file=sys.stderr,
            )
            return 130
    out = arguments.PUBLISHED if a.publish else Path(a.out) if a.out else root
    command = "python scripts/study.py " + " ".join(a.argv)
    try:
        with storage_advice("--out <another folder>"):
            if a.from_csv is not None:  # no run folder is read: the CSVs and report_inputs.json are all
                render = RENDERERS[report_of(cfg)]
                setup = study.report_setup(cfg)
                path = icl_report.from_csv(render, Path(a.from_csv), out, cfg.name, command, setup)
            else:
                study_index.report_index(root, cfg)  # a cut index is rebuilt from the jobs' rows, or refused
                setup = study.report_setup(cfg)
                # a continued study: the published report's rows join the run folders' (both writers)
                prior = {"prior": Path(a.continue_from)} if a.continue_from is not None else {}
                path = write(root, out, cfg.name, command, setup, **prior)
    except OSError as e:  # a read-only or full folder: the storage error's words (core/atomic.py)
        raise SystemExit(f"Error: study {cfg.name}: the report could not be written: {e}") from None
    print(f"report: {path}")
    return 0
