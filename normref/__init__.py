"""normref: the trusted reference for Lesson 16, "Normalize across features, one token at a time".

LayerNorm, RMSNorm (numpy and torch, functional and ``nn.Module``), Pre-LN and Post-LN
placement and a small transformer block, and the checkers that grade and diagnose a student's
implementation. Every lesson, plot, widget and grader cell of the course calls this package.
"""
from .backward import layer_norm_backward, rms_norm_backward
from .blocks import (
    CausalSelfAttention,
    FeedForward,
    TransformerBlock,
    TransformerStack,
    layer_grad_norms,
    post_ln,
    pre_ln,
)
from .checks import (
    FAULT_KINDS,
    CaseResult,
    CheckResult,
    check_layer_norm,
    check_layer_norm_backward,
    check_post_ln,
    check_pre_ln,
    check_pre_ln_block,
    check_rms_norm,
    check_rms_norm_module,
)
from .functional import LAYER_NORM_EPS, RMS_NORM_EPS, layer_norm, rms_norm
from .modules import LayerNorm, RMSNorm

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
