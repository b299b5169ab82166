"""Run one evaluation on one run folder: results go to ``<run_dir>/eval/<name>/``.

Files: ``results.csv`` (long form: one row per cell and predictor with task, scorer, model, seed, step,
the cell's coordinates, metric, value, n_samples, ci_low, ci_high), any further tables, the figures
(PNG and PDF) and ``summary.json`` (the evaluation config, checkpoint step, timings, figure names).
Re-running with the same evaluation config on the same checkpoint reuses ``summary.json`` unless
``eval.force=true``. Nothing is written outside the run folder.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from omegaconf import OmegaConf

from ssa_repro.evaluation.registry import EVALUATORS
from ssa_repro.evaluation.run import LoadedRun

log = logging.getLogger("ssa_repro.evaluate")

DEFAULT_FOR_TASK = {
    "linear": "linear_grid",
    "every": "quantifier_grid",
    "some": "quantifier_grid",
    "lm": "lm",
    "mlm": "zorro",
}


def resolve(cfg, run: LoadedRun):  # noqa: D401
    """``eval=default`` becomes the task's grid with its schema's (the paper's) defaults."""
    if cfg.name != "default":
        return cfg
    name = DEFAULT_FOR_TASK[run.cfg.task.name]
    return OmegaConf.merge(OmegaConf.structured(EVALUATORS.schemas[name]), {"force": cfg.force})


def check(run_cfg, cfg) -> list[str]:
    """Problems with an evaluation config for a run (from its config.yaml alone): before any work."""
    if cfg.name == "default":
        name = DEFAULT_FOR_TASK[run_cfg.task.name]
        cfg = OmegaConf.structured(EVALUATORS.schemas[name])
    return EVALUATORS.get(cfg.name).check(run_cfg, cfg)


def evaluate(run: LoadedRun, cfg, wandb_log: bool = True) -> dict:
    cfg = resolve(cfg, run)
    evaluator = EVALUATORS.get(cfg.name)
    out_dir = run.run_dir / "eval" / cfg.name
    key = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    key.pop("force", None)
    cached = out_dir / "summary.json"
    if cached.exists() and not cfg.force:
        summary = json.loads(cached.read_text())
        if summary.get("eval_config") == key and summary.get("step") == run.step:
            log.info("%s: cached results in %s (eval.force=true recomputes)", cfg.name, out_dir)
            return summary
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tables, summary = evaluator.run(run, cfg, out_dir)
    for stem, frame in tables.items():
        frame.to_csv(out_dir / f"{stem}.csv", index=False)
    summary = {
        **run.labels,
        "eval": cfg.name,
        "eval_config": key,
        **summary,
        "tables": [f"{s}.csv" for s in tables],
        "seconds": time.perf_counter() - t0,
    }
    cached.write_text(json.dumps(summary, indent=2, default=float) + "\n")
    log.info("%s: %.1f s, results in %s", cfg.name, summary["seconds"], out_dir)
    if wandb_log:
        _log_to_wandb(run, cfg.name, tables, [out_dir / f for f in summary.get("figures", [])])
    return summary


def _log_to_wandb(run: LoadedRun, name: str, tables: dict, figures: list[Path]) -> None:
    """Append tables and figures to the run's own W&B run (same id, same mode), if it had one."""
    id_file = run.run_dir / "wandb_id.txt"
    mode = str(run.cfg.get("logger", {}).get("mode", "disabled"))
    if not id_file.exists() or mode == "disabled":
        return
    import wandb

    with wandb.init(
        project=run.cfg.logger.project,
        entity=run.cfg.logger.entity,
        id=id_file.read_text().strip(),
        resume="allow",
        dir=str(run.run_dir),
        mode=mode,
        reinit="finish_previous",
        settings=wandb.Settings(silent=True, console="off"),
    ) as wb:
        for stem, frame in tables.items():
            wb.log({f"eval/{name}/{stem}": wandb.Table(dataframe=frame)})
        for path in figures:
            if path.suffix == ".png":
                wb.log({f"eval/{name}/{path.stem}": wandb.Image(str(path))})
