"""Statistics on the ground floor: paired tests across seeds, intervals, bimodal outcomes, power and
simulation (docs/statistics.md). Imports nothing from the rest of the package; reports/, the study
command and ``ssa-stats-table`` use it, evaluators use :mod:`ssa_repro.stats.intervals`.

- :mod:`~ssa_repro.stats.paired`: the sign-flip test, the paired bootstrap, a contrast and its verdict, Holm;
- :mod:`~ssa_repro.stats.binary`: seeds that generalise or not (Fisher; exact McNemar, its power);
- :mod:`~ssa_repro.stats.power`: the rule's simulated error rates, power (ties included) and the seeds
  needed;
- :mod:`~ssa_repro.stats.plan`: primary endpoints and the seeds for 80% power at Holm's level;
- :mod:`~ssa_repro.stats.factorial`: the 2 × 2 design paired by seed (main effects, interaction);
- :mod:`~ssa_repro.stats.equivalence`: "within ±m" that holds when seeds jump (bimodal outcomes);
- :mod:`~ssa_repro.stats.tables`: one row per contrast from per-seed records;
- :mod:`~ssa_repro.stats.intervals`: intervals over prompts and over seeds.

``from ssa_repro import stats`` gives them all as ``stats.<name>``.
"""

from ssa_repro.stats.binary import (  # noqa: F401
    FractionTest,
    McNemarTest,
    discordance,
    fraction_test,
    generalises,
    mcnemar_exact,
    power_mcnemar,
    seeds_needed_binary,
)
from ssa_repro.stats.equivalence import (  # noqa: F401
    jump_bound,
    robust_interval,
    robust_verdict,
    seeds_for_equivalence,
    simulate_equivalence,
)
from ssa_repro.stats.factorial import (  # noqa: F401
    factorial_2x2,
    factorial_table,
)
from ssa_repro.stats.intervals import (  # noqa: F401
    log_scale,
    seed_interval,
    summarize,
    wilson,
)
from ssa_repro.stats.paired import (  # noqa: F401
    ALL_VERDICTS,
    ALTERNATIVES,
    CONTRADICTED,
    FLOOR,
    MARGINS,
    MAX_EXACT,
    METRIC_SCALES,
    NONZERO_WITHIN,
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
from ssa_repro.stats.plan import (  # noqa: F401
    Endpoint,
    plan_table,
    power_for_endpoint,
    seeds_for_endpoint,
)
from ssa_repro.stats.power import (  # noqa: F401
    overlap_rule,
    power_paired,
    power_sign_flip,
    seed_bootstrap_many,
    seeds_needed,
    seeds_to_call,
    sign_flip_p_many,
    simulate_rule,
)
from ssa_repro.stats.tables import (  # noqa: F401
    contrast_table,
    per_seed_frame,
)
