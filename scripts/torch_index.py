"""Which index pip should take torch from, printed as pip arguments (`make install` passes them on).

    python3 scripts/torch_index.py          # e.g. "--extra-index-url https://download.pytorch.org/whl/cpu"

PyPI's torch wheel for Linux is the CUDA build, which pulls several nvidia-* packages; on a machine
without an NVIDIA driver the CPU build (the PyTorch CPU index, about 190 MB for torch 2.13.0 on x86-64
Linux) does the same work. The choice, first match wins:

1. ``SSA_TORCH_INDEX``: a URL (that index is added), or ``none`` (nothing added: pip's own indexes).
2. An NVIDIA driver is present (``nvidia-smi`` on the path): nothing added (PyPI's CUDA build).
3. The PyTorch CPU index answers within a few seconds: it is added.
4. Otherwise nothing is added, and a line on stderr says so: pip takes torch from the indexes it is
   configured with (on these project machines, a local CPU build; elsewhere PyPI's, the CUDA build).

Only the standard library: it runs before the virtual environment exists.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import urllib.error
import urllib.request

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TIMEOUT_S = 5.0


def reachable(url: str, timeout: float = TIMEOUT_S) -> bool:
    """Whether ``url`` answers an HTTP request (any status below 500) within ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout) as r:
            return r.status < 500
    except urllib.error.HTTPError as e:  # it answered: the index is there
        return e.code < 500
    except (OSError, ValueError):  # refused, unresolvable, timed out, a malformed URL
        return False


def choose(env=os.environ, which=shutil.which, reach=reachable) -> tuple[list[str], str]:
    """(pip arguments, why) by the rules of the module docstring."""
    given = env.get("SSA_TORCH_INDEX", "").strip()
    if given.lower() == "none":
        return [], "SSA_TORCH_INDEX=none: pip's own indexes"
    if given:
        return ["--extra-index-url", given], f"SSA_TORCH_INDEX={given}"
    if which("nvidia-smi"):
        return [], "an NVIDIA driver is present (nvidia-smi): PyPI's CUDA build of torch"
    if reach(CPU_INDEX):
        return ["--extra-index-url", CPU_INDEX], f"no NVIDIA driver: torch's CPU build from {CPU_INDEX}"
    return [], (
        f"no NVIDIA driver, and {CPU_INDEX} did not answer within {TIMEOUT_S:g} s: torch from pip's "
        "configured indexes (set SSA_TORCH_INDEX=<url> to choose)"
    )


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args(argv)  # no options: --help prints the above, without probing the network
    args, why = choose()
    print(f"torch index: {why}", file=sys.stderr)
    print(" ".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
