from ssa_repro.core.registry import Registry

TASKS: Registry = Registry("task")
