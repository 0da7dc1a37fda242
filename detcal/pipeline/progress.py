"""One progress mechanism for every command: a tqdm bar on a terminal, nothing
otherwise (or with ``progress=False``), and each step logged through
:mod:`logging` (the run's log file under the apps)."""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger("detcal")


class Progress:
    """``with Progress(enabled, desc, total) as bar: bar.step("match")``."""

    def __init__(self, enabled: bool, desc: str, total: int | None = None) -> None:
        self.desc = desc
        self._bar: Any = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm  # lazy: tqdm only when a progress bar is shown

            self._bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False)
        self._started = False

    @property
    def total(self) -> int | None:
        return None if self._bar is None else self._bar.total

    @total.setter
    def total(self, value: int) -> None:
        if self._bar is not None:
            self._bar.total = value
            self._bar.refresh()

    def step(self, what: str) -> None:
        """Start step ``what`` (the previous one is counted done)."""
        log.info("%s: %s", self.desc, what)
        if self._bar is not None:
            if self._started:
                self._bar.update(1)
            self._started = True
            self._bar.set_description(f"{self.desc}: {what}")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            if self._started and exc[0] is None:
                self._bar.update(1)
            self._bar.close()
