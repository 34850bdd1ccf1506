"""normref: the trusted reference for Lesson 16, "Normalize across features, one token at a time".

LayerNorm, RMSNorm and DyT (numpy and torch, functional and ``nn.Module``), Pre-LN, Post-LN,
Peri-LN, Output-LN and DeepNorm placement, QK-norm and a small transformer block, and the
checkers that grade and diagnose a student's implementation. Every lesson, plot, widget and
grader cell of the course calls this package.
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
    check_dyt,
    check_layer_norm_backward,
    check_peri_ln,
    check_post_ln,
    check_pre_ln,
    check_pre_ln_block,
    check_qk_norm_logits,
    check_rms_norm,
    check_rms_norm_module,
)
from .functional import LAYER_NORM_EPS, RMS_NORM_EPS, dyt, layer_norm, rms_norm
from .modules import DyT, LayerNorm, RMSNorm
from .placements import PLACEMENTS, deep_norm, deepnorm_constants, output_ln, peri_ln, qk_norm_logits

__version__ = "0.1.0"

__all__ = [
    "layer_norm",
    "rms_norm",
    "dyt",
    "LAYER_NORM_EPS",
    "RMS_NORM_EPS",
    "layer_norm_backward",
    "rms_norm_backward",
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
