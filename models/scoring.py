"""Figures of the project's labelled evaluations (dated tagging in ``models.tagging.dated``, event derivation in
``pipeline.events``), written the same way in every report."""

from __future__ import annotations


def ratio(part: int, whole: int) -> float | None:
    """``part / whole`` to four decimals (a precision or a recall), or None when ``whole`` is 0: nothing to score."""
    return round(part / whole, 4) if whole else None
