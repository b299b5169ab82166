"""What a running study shows and how it stops: one progress line (or a log line per job), a clock that
rewrites the wall time while jobs run, and SIGTERM turned into the interrupt that stops joblib's workers.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import signal
import sys
import threading
import time

from tqdm import tqdm

log = logging.getLogger("ssa_repro.study")


@contextlib.contextmanager
def wall_clock(write, every: float):
    """Call ``write()`` every ``every`` seconds from a daemon thread while the block runs; the thread has
    stopped when the block ends, so what the caller writes after it is the last word."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every):
            write()

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class Progress:
    """One overall line for the study (tqdm: jobs done of N, failures, elapsed, ETA), drawn only when
    stderr is a terminal; elsewhere (a log file, CI) one log line per finished job instead of joblib's
    ``[Parallel(n_jobs=1)]: Done 1 tasks`` chatter, with the time since this invocation started and the
    jobs left at the rate so far (elapsed / done × left: jobs running side by side count as they finish)."""

    def __init__(self, name: str, total: int, clock=time.monotonic):
        self.done_n, self.failed, self.total = 0, 0, total
        self.clock, self.t0 = clock, clock()
        self.bar = tqdm(total=total, desc=f"study {name}", unit="job", disable=not sys.stderr.isatty())

    def done(self, job, why: str) -> None:
        self.done_n += 1
        self.failed += bool(why)
        if self.bar.disable:
            failed = ", failed" if why else ""
            elapsed = self.clock() - self.t0
            left = elapsed / self.done_n * (self.total - self.done_n)
            log.info(
                "job %d of %d done (%s/%s%s): %s elapsed, about %s left at this rate",
                self.done_n,
                self.total,
                job.group,
                job.name,
                failed,
                _hms(elapsed),
                _hms(left),
            )
            return
        self.bar.set_postfix(failed=self.failed, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def _hms(seconds: float) -> str:
    """3725.4 -> '1:02:05' (as the training log's ETA)."""
    return str(datetime.timedelta(seconds=round(seconds)))


@contextlib.contextmanager
def workers_stop_on_sigterm():
    """SIGTERM (``kill <pid>``, a scheduler's stop) raises KeyboardInterrupt while the jobs run, as
    Ctrl-C does: joblib then terminates its worker processes. Without it the study process dies and
    its workers go on training, holding their runs' locks, so the next ``study.py`` finds those runs
    locked (found when a study was restarted with ``kill``)."""

    def stop(signum, frame):
        raise KeyboardInterrupt(f"stopped by signal {signum}")

    if threading.current_thread() is not threading.main_thread():  # signals go to the main thread only
        yield
        return
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
