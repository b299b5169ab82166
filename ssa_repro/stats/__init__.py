"""Statistics on the ground floor: paired tests across seeds, intervals, bimodal outcomes, power and
simulation (docs/statistics.md). Imports nothing from the rest of the package; reports/, the study
command and ``ssa-stats-table`` use it, evaluators use :mod:`ssa_repro.stats.intervals`.

- :mod:`~ssa_repro.stats.paired`: the sign-flip test, the paired bootstrap, a contrast and its verdict, Holm;
- :mod:`~ssa_repro.stats.binary`: seeds that generalise or not;
- :mod:`~ssa_repro.stats.power`: the rule's simulated error rates, power and the seeds needed;
- :mod:`~ssa_repro.stats.tables`: one row per contrast from per-seed records;
- :mod:`~ssa_repro.stats.intervals`: intervals over prompts and over seeds.

``from ssa_repro import stats`` gives them all as ``stats.<name>``.
"""

from ssa_repro.stats.binary import (  # noqa: F401
    FractionTest,
    fraction_test,
    generalises,
)
from ssa_repro.stats.intervals import (  # noqa: F401
    log_scale,
    seed_interval,
    summarize,
    wilson,
)
from ssa_repro.stats.paired import (  # noqa: F401
    ALTERNATIVES,
    CONTRADICTED,
    FLOOR,
    MARGINS,
    MAX_EXACT,
    METRIC_SCALES,
    PROMPT_DESIGNS,
    SCALES,
    UNDERPOWERED,
    VERDICTS,
    WITHIN,
    YES,
    Contrast,
    Margin,
    expanded_level,
    holm,
    paired_bootstrap,
    paired_contrast,
    per_seed_differences,
    sign_flip_p,
    student_interval,
    verdict,
)
from ssa_repro.stats.power import (  # noqa: F401
    overlap_rule,
    power_paired,
    seed_bootstrap_many,
    seeds_needed,
    seeds_to_call,
    simulate_rule,
)
from ssa_repro.stats.tables import (  # noqa: F401
    contrast_table,
    per_seed_frame,
)
