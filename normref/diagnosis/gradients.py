"""The case form of the LayerNorm backward search, ``(dy, x, weight, eps)``.

The backward's grammar (its variants are analytic gradients, the assignment's answer among them)
is the grader's: ``grader/backward.py`` registers it with :func:`normref.diagnosis.register_grammar`.
In a student's kernel there is none, and a gradient the known fault kinds do not explain gets
what was measured (:func:`normref.diagnosis.measure.describe`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BackwardCase"]


@dataclass
class BackwardCase:
    """``dy, x [..., D]`` float64, ``weight [D]``, ``eps``."""

    dy: np.ndarray
    x: np.ndarray
    weight: np.ndarray
    eps: float
