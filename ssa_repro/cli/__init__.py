"""Entry points (the top layer): the Hydra glue of ``train.py`` and ``evaluate.py``, sweep folders and
the checks that run before Hydra writes anything."""
