"""normref: the trusted reference for Lesson 16, "Normalize across features, one token at a time".

LayerNorm, RMSNorm (numpy and torch, functional and ``nn.Module``), Pre-LN and Post-LN
placement and a small transformer block, and the checkers that grade and diagnose a student's
implementation. Every lesson, plot, widget and grader cell of the course calls this package.
"""
from __future__ import annotations

import importlib

#: Where each public name is defined. Imported on first use (PEP 562), so that ``import normref``
#: and the numpy-only assignments load neither torch (normref.blocks, normref.modules,
#: normref.checks.block) nor anything they do not use; ``from normref import layer_norm`` works
#: as before.
_LAZY = {
    "layer_norm": "functional", "rms_norm": "functional", "LAYER_NORM_EPS": "functional",
    "RMS_NORM_EPS": "functional",
    "layer_norm_backward": "backward", "rms_norm_backward": "backward",
    "LayerNorm": "modules", "RMSNorm": "modules",
    "pre_ln": "blocks", "post_ln": "blocks", "TransformerBlock": "blocks", "TransformerStack": "blocks",
    "CausalSelfAttention": "blocks", "FeedForward": "blocks", "layer_grad_norms": "blocks",
    "check_rms_norm": "checks", "check_layer_norm": "checks", "check_rms_norm_module": "checks",
    "check_pre_ln": "checks", "check_post_ln": "checks", "check_pre_ln_block": "checks",
    "check_layer_norm_backward": "checks", "CheckResult": "checks", "CaseResult": "checks",
    "FAULT_KINDS": "checks",
}
#: The package's modules, also reachable as attributes (``normref.blocks``) before they are imported.
_SUBMODULES = ("answers", "backward", "blocks", "checks", "diagnosis", "experiments", "faults", "functional",
               "handback", "modules", "plots", "practice", "rules", "tamper", "widgets")

__version__ = "0.1.0"

__all__ = [
    "layer_norm",
    "rms_norm",
    "LAYER_NORM_EPS",
    "RMS_NORM_EPS",
    "layer_norm_backward",
    "rms_norm_backward",
    "LayerNorm",
    "RMSNorm",
    "pre_ln",
    "post_ln",
    "TransformerBlock",
    "TransformerStack",
    "CausalSelfAttention",
    "FeedForward",
    "layer_grad_norms",
    "check_rms_norm",
    "check_layer_norm",
    "check_rms_norm_module",
    "check_pre_ln",
    "check_post_ln",
    "check_pre_ln_block",
    "check_layer_norm_backward",
    "CheckResult",
    "CaseResult",
    "FAULT_KINDS",
]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value  # found directly from now on
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
