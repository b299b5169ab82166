"""scripts/verdict_changes.py: the rows named as the reports name them, an archived table without a
verdict column skipped, and a change listed with "—" for a row that is new."""

from __future__ import annotations

import importlib.util

import pandas as pd

from tests.conftest import ROOT


def _script():
    spec = importlib.util.spec_from_file_location("verdict_changes", ROOT / "scripts" / "verdict_changes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_are_keyed_by_endpoint_and_test_or_claim_and_contrast():
    s = _script()
    primary = "endpoint,test,verdict\na,confirmatory (100–139),interim\na,replication (1–2),yes\n"
    assert s.verdicts(primary, "primary") == {"a (confirmatory)": "interim", "a (replication)": "yes"}
    claims = "claim,contrast,verdict\nc,x,yes\n"
    assert s.verdicts(claims, "claims") == {"c: x": "yes"}
    assert s.verdicts("claim,reproduced\nc,partly\n", "claims") is None  # an archived table: not compared
    assert s.verdicts(None, "claims") == {}


def test_the_table_names_old_and_new_and_marks_a_new_row():
    s = _script()
    t = pd.DataFrame(
        [
            {"study": "x", "kind": "claims", "name": "c: a|b", "old": "yes", "new": "contradicted"},
            {"study": "x", "kind": "primary", "name": "e (confirmatory)", "old": s.NONE, "new": "yes"},
        ]
    )
    md = s.markdown(t).split("\n")
    assert md[2] == "| x | c: a/b | yes | contradicted |"
    assert md[3] == "| x | primary: e (confirmatory) | — | yes |"
