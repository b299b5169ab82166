"""Training: the trainer and its checkpoints."""
