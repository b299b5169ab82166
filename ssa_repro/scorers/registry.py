from ssa_repro.registry import Registry

SCORERS: Registry = Registry("scorer")
