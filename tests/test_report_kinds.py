"""Report kinds are plugins (issue 58): each module of ``ssa_repro/reports/kinds/`` registers its kind by
name when imported, the package imports every module of its folder, and a study's ``report`` key is
checked against what that scan found. The reports package keeps its modules small (under 500 lines)."""

from __future__ import annotations

import pkgutil

import pytest

from ssa_repro.core.registry import UnknownNameError
from ssa_repro.reports import early_cells, kinds, paired
from ssa_repro.reports.kinds import early, icl
from tests.conftest import ROOT

REPORTS = ROOT / "ssa_repro" / "reports"


def test_every_module_of_the_folder_is_a_registered_kind_of_its_name():
    found = sorted(m.name for m in pkgutil.iter_modules([str(REPORTS / "kinds")]) if m.name != "registry")
    assert kinds.REPORTS.names() == found == ["early", "icl"]
    assert kinds.get("icl").write is icl.write and kinds.get("icl").render is icl.render
    assert kinds.get("early").render is early.render
    assert (
        kinds.get("icl").read_back is paired.read_back
        and kinds.get("early").read_back is early_cells.read_back
    )
    assert kinds.get(None) is kinds.get("icl")  # a study without a `report` key


def test_an_unknown_kind_is_refused_naming_the_registered_ones():
    with pytest.raises(UnknownNameError, match="unknown report 'length'; registered reports: early, icl"):
        kinds.get("length")


def test_every_study_names_a_registered_kind():
    import yaml

    for path in sorted((ROOT / "conf" / "study").glob("*.yaml")):
        name = (yaml.safe_load(path.read_text()) or {}).get("report")
        assert name is None or name in kinds.REPORTS, f"{path.name}: report={name!r}"


@pytest.mark.parametrize("path", sorted(REPORTS.rglob("*.py")), ids=lambda p: str(p.relative_to(REPORTS)))
def test_no_reports_module_is_over_500_lines(path):
    assert len(path.read_text().splitlines()) <= 500, f"{path}: split it by idea"
