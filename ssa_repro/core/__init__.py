"""Layer 0: small pieces every other layer may use (registries, distributions, enums, provenance, file
writes, run locks, W&B). Nothing here imports another ``ssa_repro`` package."""
