"""ssa_repro: small transformers trained from scratch on in-context-learning tasks, with swappable
attention scoring functions (softmax, Scaled Signed Averaging, ...). See README.md."""

__version__ = "0.1.0"
