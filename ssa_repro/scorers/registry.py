from ssa_repro.core.registry import Registry

SCORERS: Registry = Registry("scorer")
