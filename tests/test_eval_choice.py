"""The one rule for which evaluations run on a study job (ssa_repro/evaluation/choice.py): the runner
(studies/study.py `evaluations`) and the reports' missing-data notes (reports/paired.py `evaluated_keys`)
read it, so what a report expects is what the runner evaluates — checked on every study in conf/study,
group by group and task by task, against the rule written out here independently."""

from __future__ import annotations

import pytest

from ssa_repro.config import CONF_DIR
from ssa_repro.evaluation.choice import chosen
from ssa_repro.reports import inputs
from ssa_repro.studies import study

STUDIES = sorted(p.stem for p in (CONF_DIR / "study").glob("*.yaml"))


@pytest.mark.parametrize("name", STUDIES)
def test_the_report_expects_what_the_runner_evaluates(name):
    s = study.load(name)
    expects = inputs.evaluated_keys(study.report_setup(s))
    names = {}  # study task key -> registered task: its task= override, else as the runner composes it
    for group, g in s.groups.items():
        for task in g.tasks:
            if task not in names:
                named = [o.split("=", 1)[1] for o in s.tasks[task] if o.startswith("task=")]
                job = next(j for j in study.jobs(s) if j.group == group and j.task == task)
                names[task] = named[-1] if named else str(study.compose(job).task.name)
            runs = list(study.evaluations(s, names[task], group))
            assert expects(group, task) == runs, (name, group, task)


def test_groups_and_tasks_restrict_and_grids_follow_the_task():
    evals = {
        "grid_quantifier": {"name": "grid"},
        "grid_linear": {"name": "grid"},
        "grid_mqar": {"name": "grid"},
        "deviant": {"name": "deviant"},
        "deviant_every": {"name": "deviant", "tasks": ["every"]},
        "boundary_core": {"name": "boundary", "groups": ["core"]},
    }
    assert chosen(evals, "linear", "core") == ["grid_linear", "deviant", "boundary_core"]
    assert chosen(evals, "linear", "other") == ["grid_linear", "deviant"]
    assert chosen(evals, "linear") == ["grid_linear", "deviant", "boundary_core"]  # any group
    assert chosen(evals, "every", "core") == ["grid_quantifier", "deviant", "deviant_every"]
    assert chosen(evals, "some", "core") == ["grid_quantifier", "deviant"]
    assert chosen(evals, "mqar", "core") == ["grid_mqar"]  # its own grid; deviant and boundary do not apply
    assert chosen(evals, "no_such_task") == []
    # eval=lm's `tasks` are its own (LM-eval tasks), not a restriction to study tasks
    assert chosen({"lm": {"name": "lm", "tasks": ["copa"]}}, "lm") == ["lm"]
