"""Errors of the sentiment model (no heavy imports here)."""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """The model cannot be built: base package, delta file or config missing or corrupt. The message names the fix."""
