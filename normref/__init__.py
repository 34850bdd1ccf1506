"""normref: the trusted reference for Lesson 16, "Normalize across features, one token at a time".

LayerNorm, RMSNorm (numpy and torch), and the checkers that grade and diagnose a student's
implementation. Every lesson, plot, widget and grader cell of the course calls this package.
"""
from .checks import FAULT_KINDS, CaseResult, CheckResult, check_layer_norm, check_rms_norm
from .functional import LAYER_NORM_EPS, RMS_NORM_EPS, layer_norm, rms_norm

__version__ = "0.1.0"

__all__ = [
    "layer_norm",
    "rms_norm",
    "LAYER_NORM_EPS",
    "RMS_NORM_EPS",
    "check_rms_norm",
    "check_layer_norm",
    "CheckResult",
    "CaseResult",
    "FAULT_KINDS",
]
