"""normref: the trusted reference for Lesson 16, "Normalize across features, one token at a time".

LayerNorm, RMSNorm and DyT (numpy and torch, functional and ``nn.Module``), Pre-LN, Post-LN,
Peri-LN, Output-LN and DeepNorm placement, QK-norm and a small transformer block, and the
checkers that grade and diagnose a student's implementation. Every lesson, plot, widget and
grader cell of the course calls this package.
"""
from __future__ import annotations

import importlib

#: Where each public name is defined. Imported on first use (PEP 562), so that ``import normref``
#: and the numpy-only assignments load neither torch (normref.blocks, normref.modules,
#: normref.checks.block) nor anything they do not use; ``from normref import layer_norm`` works
#: as before.
_LAZY = {
    "layer_norm": "functional", "rms_norm": "functional", "LAYER_NORM_EPS": "functional",
    "RMS_NORM_EPS": "functional", "dyt": "functional",
    "LayerNorm": "modules", "RMSNorm": "modules", "DyT": "modules",
    "peri_ln": "placements", "output_ln": "placements", "deep_norm": "placements",
    "deepnorm_constants": "placements", "qk_norm_logits": "placements", "PLACEMENTS": "placements",
    "pre_ln": "blocks", "post_ln": "blocks", "TransformerBlock": "blocks", "TransformerStack": "blocks",
    "CausalSelfAttention": "blocks", "FeedForward": "blocks", "layer_grad_norms": "blocks",
    "check_rms_norm": "checks", "check_layer_norm": "checks", "check_rms_norm_module": "checks",
    "check_pre_ln": "checks", "check_post_ln": "checks", "check_pre_ln_block": "checks",
    "check_layer_norm_backward": "checks", "check_peri_ln": "checks", "check_qk_norm_logits": "checks",
    "check_dyt": "checks", "CheckResult": "checks", "CaseResult": "checks",
    "FAULT_KINDS": "checks",
}
#: The package's modules, also reachable as attributes (``normref.blocks``) before they are imported.
_SUBMODULES = ("answer_parsing", "answers", "backward", "blocks", "calling", "checks", "diagnosis", "experiments",
               "faults", "functional", "handback", "modern_experiments", "modern_plots", "modules", "placements",
               "plan", "plot_style", "plots", "practice", "recorder", "reference_code", "rules", "tamper", "widgets",
               "wire")

__version__ = "0.1.0"

__all__ = [
    "layer_norm",
    "rms_norm",
    "dyt",
    "LAYER_NORM_EPS",
    "RMS_NORM_EPS",
    "LayerNorm",
    "RMSNorm",
    "DyT",
    "pre_ln",
    "post_ln",
    "peri_ln",
    "output_ln",
    "deep_norm",
    "deepnorm_constants",
    "qk_norm_logits",
    "PLACEMENTS",
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
    "check_peri_ln",
    "check_qk_norm_logits",
    "check_dyt",
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
