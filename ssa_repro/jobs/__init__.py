"""A training job: prepared once (prepared.py), then trained and evaluated (train_job.py)."""
