"""Fit reports of the calibrators: did the optimiser succeed, did a parameter stop at a bound.

Every calibrator sets ``fit_report_`` in ``fit`` (a plain JSON-ready dict, so
it appears in :meth:`~detcal.calibration.base.Calibrator.describe` and hence
in ``metrics.json``):

``ok``                  ``converged`` and no parameter stopped at a search box
``converged``           the optimiser reported success (closed forms: True)
``method``              the optimiser or the closed form used
``n_iter``              iterations (``None`` for closed forms)
``message``             the optimiser's message, or what went wrong, in words
``at_bound``            parameters that stopped at an *artificial* search box,
                        e.g. ``temperature`` at 1e4: the optimum lies beyond it,
                        the learned map is a truncation, not a fit
``active_constraints``  parameters at a *model* constraint (beta calibration's
                        ``a, b >= 0``): the constrained optimum, reported only
``notes``               anything else worth knowing (sparse cells, fallbacks)

When ``ok`` is false, ``fit`` issues a :class:`CalibrationFitWarning` that
names the calibrator, the parameter, its value and the bound.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any


class CalibrationFitWarning(UserWarning):
    """A calibrator's fit did not converge, or a parameter stopped at its search bound."""


def make_report(
    *,
    converged: bool = True,
    method: str = "closed form",
    n_iter: int | None = None,
    message: str = "",
    at_bound: Iterable[dict[str, Any]] = (),
    active_constraints: Iterable[dict[str, Any]] = (),
    notes: Iterable[str] = (),
) -> dict[str, Any]:
    """A fit report (keys as in the module docstring).

    ``at_bound`` / ``active_constraints`` items are ``{"parameter": name,
    "value": v, "bound": b}`` dicts.
    """
    ab = [dict(d) for d in at_bound]
    return {
        "ok": bool(converged) and not ab,
        "converged": bool(converged),
        "method": str(method),
        "n_iter": None if n_iter is None else int(n_iter),
        "message": str(message),
        "at_bound": ab,
        "active_constraints": [dict(d) for d in active_constraints],
        "notes": [str(n) for n in notes],
    }


def report_problems(report: dict[str, Any]) -> list[str]:
    """The problems of a report, in words (empty when ``ok``)."""
    out = []
    if not report.get("converged", True):
        out.append(f"the optimiser ({report.get('method')}) did not converge: {report.get('message') or 'no message'}")
    for d in report.get("at_bound", []):
        out.append(
            f"parameter {d['parameter']} = {d['value']:.6g} stopped at its search bound {d['bound']:.6g} "
            "(the likelihood optimum lies beyond it)"
        )
    return out


def warn_report(owner: str, report: dict[str, Any], stacklevel: int = 3) -> None:
    """Issue one :class:`CalibrationFitWarning` for a report that is not ``ok``."""
    problems = report_problems(report)
    if problems:
        warnings.warn(
            f"{owner}: fit is not trustworthy: "
            + "; ".join(problems)
            + ". The learned map is recorded in fit_report_; consider another calibrator.",
            CalibrationFitWarning,
            stacklevel=stacklevel,
        )


__all__ = ["CalibrationFitWarning", "make_report", "report_problems", "warn_report"]
