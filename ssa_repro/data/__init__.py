"""Offline corpora and tokenisers for the NLP tasks (``task=lm``, ``task=mlm``).

Files come from ``data.root`` (default ``../shared/data`` beside the repository, or ``$SSA_DATA_ROOT``);
nothing is downloaded. See ``../shared/data/README.md`` for what each file is.
"""

from ssa_repro.data.paths import DataFileError, data_file, resolve_root

__all__ = ["DataFileError", "data_file", "resolve_root"]
