"""Studies: paired-seed matrices of training jobs, defined (study.py, the file checked against schema.py
first), run and resumed (engine.py, with index.py's record of every finished job, progress.py, and
ensembles.py's seed ensembles)."""
