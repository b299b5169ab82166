"""Download (or build from public inputs) what the corpus tasks read into data.root, checked against
ssa_repro/data/manifest.yaml.

    python scripts/get_data.py [--root DIR] [--only childes zorro lm lm_eval tokenizers] [--base-url URL]
                               [--cache-dir DIR]

See ssa_repro/data/download.py and README "Data".
"""

import sys

from ssa_repro.data.download import main

if __name__ == "__main__":
    sys.exit(main())
