"""seeds.html of ``python -m detcal.studies.main_job_seeds``: Table 1 of every training seed with the mean ± std over the
seeds (:func:`detcal.reports.html.main_page.seeds_table`), as a self-contained page."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from detcal._version import __version__
from detcal.reports.html.main_page import seeds_table
from detcal.reports.html.page import html_page

__all__ = ["seeds_page"]


def seeds_page(tables: Mapping[str, Mapping[str, Any]], about: str = "") -> str:
    """The page of :func:`seeds_table` over ``{seed label: table1.json content}`` (``about``: where they are)."""
    body = seeds_table(tables) or "<p class=note>Fewer than two seeds: no per-seed table.</p>"
    return html_page({"command": "detcal-main seeds", "detcal_version": __version__, "run_dir": about}, body)
