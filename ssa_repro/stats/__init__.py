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

from ssa_repro.stats.paired import (  # noqa: F401
    FLOOR,
    SCALES,
    ALTERNATIVES,
    PROMPT_DESIGNS,
    MAX_EXACT,
    YES,
    CONTRADICTED,
    WITHIN,
    UNDERPOWERED,
    VERDICTS,
    MARGINS,
    Margin,
    METRIC_SCALES,
    sign_flip_p,
    per_seed_differences,
    expanded_level,
    paired_bootstrap,
    Contrast,
    paired_contrast,
    verdict,
    student_interval,
    holm,
)
from ssa_repro.stats.binary import (  # noqa: F401
    FractionTest,
    fraction_test,
    generalises,
)
from ssa_repro.stats.power import (  # noqa: F401
    overlap_rule,
    seed_bootstrap_many,
    simulate_rule,
    power_paired,
    seeds_to_call,
    seeds_needed,
)
from ssa_repro.stats.tables import (  # noqa: F401
    per_seed_frame,
    contrast_table,
)
from ssa_repro.stats.intervals import (  # noqa: F401
    wilson,
    log_scale,
    summarize,
    seed_interval,
)
