from ssa_repro.registry import Registry

TASKS: Registry = Registry("task")
