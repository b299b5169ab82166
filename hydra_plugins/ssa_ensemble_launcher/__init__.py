"""``hydra/launcher=ensemble``: a multirun's jobs that differ only in ``seed`` train in one process as
one stacked model (``ssa_repro/training/ensemble.py``); docs/sweeps.md, "Seed ensembles"."""
