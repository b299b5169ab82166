"""Studies: planning, running, resuming and publishing paired-seed studies (study.py), their files
checked against a schema first (schema.py)."""
