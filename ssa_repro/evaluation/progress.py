"""Progress over cells: a tqdm bar on a terminal, log lines elsewhere (CI, SLURM, log files)."""

from __future__ import annotations

import logging
import time

from tqdm.auto import tqdm

log = logging.getLogger("ssa_repro.evaluate")


class Progress:
    """Progress over cells: a tqdm bar on a terminal; elsewhere (logs, CI, SLURM) a log line at every
    10% with the elapsed time and an ETA. Used as ``with Progress(total, "name") as bar: bar.update(1)``."""

    def __init__(self, total: int, desc: str):
        self.bar = tqdm(total=total, desc=desc, disable=None)
        self.total, self.desc, self.done, self.next_pct = total, desc, 0, 10.0
        self.t0 = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.bar.update(n)
        self.done += n
        pct = 100.0 * self.done / max(self.total, 1)
        if self.bar.disable and (pct >= self.next_pct or self.done == self.total):
            elapsed = time.perf_counter() - self.t0
            eta = elapsed * (self.total - self.done) / max(self.done, 1)
            log.info(
                "%s: %d/%d cells (%.0f%%), %.0f s elapsed, about %.0f s left",
                self.desc,
                self.done,
                self.total,
                pct,
                elapsed,
                eta,
            )
            self.next_pct = (pct // 10 + 1) * 10

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
