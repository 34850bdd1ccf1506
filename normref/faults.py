"""The fault registry: every mistake a checker can name, in one table.

Each :class:`Fault` has its ``kind`` (a stable machine name such as ``unbiased_variance``), the
sentence a student reads (in torch's words, and in numpy's where the two differ: ``dim=-1`` /
``axis=-1``, ``keepdim`` / ``keepdims``, ``x.float()`` / ``x.astype(np.float32)``, a new tensor /
a new array), the short label the class report prints, and which checkers name it: the code
checkers (:mod:`normref.checks`) or the short-answer checkers (:mod:`normref.answers`).

The kinds a checker diagnosed travel with its output, not in the text a student reads: a
displayed :class:`normref.checks.CheckResult` puts them in the output's metadata,
``{"normref": {"faults": [...]}}`` (:func:`output_metadata`), which JupyterLab and nbconvert's
HTML do not render. :func:`parse_tags` reads them back from a notebook cell's outputs (and,
for notebooks graded before this format, from ``[fault: <kind>]`` tags in the output text,
:func:`format_tag`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "Fault",
    "FAULTS",
    "ALIASES",
    "METADATA_KEY",
    "BACKENDS",
    "message",
    "label",
    "canonical",
    "kinds",
    "format_tag",
    "split_tags",
    "parse_tags",
    "parse_variants",
    "output_metadata",
]

#: The output-metadata key under which a checker's faults travel.
METADATA_KEY = "normref"

#: The backends a message can be worded for.
BACKENDS = ("torch", "numpy")


@dataclass(frozen=True)
class Fault:
    """One mistake a checker can name.

    Attributes:
        kind: stable machine name, e.g. ``"unbiased_variance"``.
        message: the sentence a student reads (torch's vocabulary where it names an API).
        label: a short phrase for the class report ("3 of 20 <label>"), at most 48 characters.
        numpy: the sentence in numpy's vocabulary, where it differs from ``message``.
        source: ``"code"`` (named by the implementation checkers) or ``"answer"`` (only by the
            short-answer checkers).
        aliases: earlier names of this kind, still read from notebooks graded with them.
    """

    kind: str
    message: str
    label: str
    numpy: str | None = None
    source: str = "code"
    aliases: tuple[str, ...] = ()
    #: the sentence for RMSNorm, where LayerNorm's words (the variance) do not apply to it
    rms: str | None = None

    def text(self, backend: str = "torch", norm: str = "layer") -> str:
        """The student's sentence for ``backend`` (``"torch"`` or ``"numpy"``) and ``norm``
        (``"layer"`` or ``"rms"``: RMSNorm has a mean square, not a variance)."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be 'torch' or 'numpy', got {backend!r}")
        if norm == "rms" and self.rms:
            return self.rms
        return self.numpy if backend == "numpy" and self.numpy else self.message


_TABLE = [
    # ------------------------------------------------------------ norms (check_rms_norm, ...)
    Fault("unbiased_variance", "did you divide by n-1 (unbiased variance) instead of n? "
          "Normalization uses the biased statistic: divide by d.",
          "used the n-1 (unbiased) variance",
          rms="did you divide by n-1 instead of n? RMSNorm's mean square is the plain mean of "
          "x**2 over the d features: divide by d."),
    Fault("eps_outside_sqrt", "eps belongs inside the square root: sqrt(var + eps), not "
          "sqrt(var) + eps.", "put eps outside the square root",
          rms="eps belongs inside the square root: sqrt(mean(x**2) + eps), not "
          "sqrt(mean(x**2)) + eps."),
    Fault("no_eps", "eps is missing: add it inside the square root, sqrt(var + eps); without it "
          "tiny rows are blown up and a constant row gives 0/0.", "left eps out",
          rms="eps is missing: add it inside the square root, sqrt(mean(x**2) + eps); without it "
          "tiny rows are blown up and a row of zeros gives 0/0."),
    Fault("wrong_axis", "the statistics were taken over the wrong axis: reduce over the last "
          "axis (dim=-1), the d features of one token.", "reduced over the wrong axis",
          numpy="the statistics were taken over the wrong axis: reduce over the last axis "
          "(axis=-1), the d features of one token."),
    Fault("missing_keepdim", "without keepdim=True the reduced axis disappears and the "
          "statistic broadcasts against the wrong axes: keepdim=True keeps it with length 1, "
          "shape [..., 1].", "dropped keepdim=True",
          numpy="without keepdims=True the reduced axis disappears and the statistic "
          "broadcasts against the wrong axes: keepdims=True keeps it with length 1, shape "
          "[..., 1].", aliases=("dropped_keepdim",)),
    Fault("low_precision_stats", "the statistics were computed in the input's low precision "
          "(x**2 overflows float16 above 256): compute them in float32 with x.float(), then "
          "cast back.", "computed statistics in float16/bfloat16",
          numpy="the statistics were computed in the input's low precision (x**2 overflows "
          "float16 above 256): compute them in float32 with x.astype(np.float32), then cast "
          "back with .astype(x.dtype)."),
    Fault("wrong_dtype", "the output dtype must be the input dtype: cast back with "
          ".to(x.dtype).", "returned the wrong dtype",
          numpy="the output dtype must be the input dtype: cast back with .astype(x.dtype)."),
    Fault("subtracts_mean", "RMSNorm does not subtract the mean: it only rescales by the RMS.",
          "subtracted the mean in RMSNorm"),
    Fault("not_centered", "the mean was not subtracted: LayerNorm centers each token before "
          "dividing (without it, it is RMSNorm).", "did not subtract the mean in LayerNorm"),
    Fault("nan_on_constant_row", "a constant row has variance 0: keep eps inside the square "
          "root so the output is finite (it must equal beta).", "produced NaN on a constant row",
          rms="a row of zeros has mean square 0: keep eps inside the square root so the output "
          "is finite (it must be 0)."),
    Fault("mutates_input", "your function modified its input in place: compute into a new "
          "tensor.", "modified the input in place",
          numpy="your function modified its input in place: compute into a new array."),
    Fault("wrong_shape", "the output must have the input's shape.", "returned the wrong shape"),
    Fault("wrong_type", "return the same kind of array you were given (torch in, torch out).",
          "returned numpy for torch or the reverse",
          numpy="return the same kind of array you were given (numpy in, numpy out)."),
    Fault("returns_nan", "the output contains NaN or inf where the reference is finite.",
          "returned NaN or inf"),
    Fault("raises", "your function raised an exception.",
          "had code that raised (often: not implemented)"),
    Fault("timeout", "your function did not return in time (an infinite loop?).",
          "had code that did not finish"),
    Fault("ignores_weight", "the weight (gamma) was not applied.", "did not apply the weight (gamma)"),
    Fault("ignores_bias", "the bias (beta) was not added.", "did not add the bias (beta)"),
    Fault("wrong_values", "the values differ from the reference.",
          "returned wrong values (no specific diagnosis)"),
    Fault("measured", "a mistake outside this list: the message says what was measured (normref.diagnosis: "
          "the output's response to each input and parameter, a constant factor, the statistics).",
          "made a mistake the checks measured (see groups)"),
    Fault("other_formula", "a formula outside this list: the message states the formula the code computes "
          "beside the one asked (normref.diagnosis traced it, or identified it from the outputs).",
          "computed another formula (see groups)"),
    Fault("found_variant", "a mistake outside this list, found by trying variants of the "
          "reference (normref.diagnosis): the message names it.",
          "made a mistake the search named (see groups)"),
    # ------------------------------------------------------------ placement and the block
    Fault("residual_from_normed", "the residual path must carry x itself: Pre-LN is "
          "x + F(Norm(x)), not Norm(x) + F(Norm(x)).",
          "added Norm(x) instead of x on the residual path"),
    Fault("pre_post_swapped", "that is the other placement: Pre-LN is x + F(Norm(x)) (normalize "
          "the sublayer's input), Post-LN is Norm(x + F(x)) (normalize after the residual add).",
          "confused Pre-LN and Post-LN", aliases=("post_ln_formula",)),
    Fault("missing_residual", "the residual add is missing: add the original x back.",
          "left out the residual add"),
    Fault("missing_norm", "the norm was not applied.", "left out the norm"),
    Fault("ignores_sublayer", "the sublayer was not used: a residual sublayer adds F's output to "
          "x.", "left out the sublayer F"),
    Fault("norm_on_sublayer_output", "the norm was applied to the sublayer's output F(x) "
          "instead of where the placement puts it: x + Norm(F(x)) is Output-LN (OLMo 2's placement).",
          "normalized the sublayer's output", aliases=("norm_after_sublayer",)),
    Fault("is_peri_ln", "that is Peri-LN, x + Norm(F(Norm(x))) (Gemma 2's placement): the norm "
          "sits on both sides of the sublayer.", "wrote Peri-LN, x + Norm(F(Norm(x)))"),
    Fault("is_pre_ln", "that is Pre-LN, x + F(Norm(x)): the sublayer's output is not normalized.",
          "wrote Pre-LN, x + F(Norm(x))"),
    Fault("is_post_ln", "that is Post-LN, Norm(x + F(x)): the norm sits after the residual add.",
          "wrote Post-LN, Norm(x + F(x))"),
    Fault("is_output_ln", "that is Output-LN, x + Norm(F(x)) (OLMo 2's placement): the "
          "sublayer's input is not normalized.", "wrote Output-LN, x + Norm(F(x))"),
    Fault("residual_scaled", "the residual path was scaled: Norm(alpha x + F(x)) is DeepNorm "
          "(Wang et al. 2022), Post-LN with the residual scaled by alpha.",
          "scaled the residual (DeepNorm's alpha x)"),
    Fault("norms_swapped", "input_layernorm belongs before attention and "
          "post_attention_layernorm before the feed-forward net; yours are swapped.",
          "swapped the block's two norms"),
    Fault("shared_norm", "the two sublayers need two separate norms (input_layernorm and "
          "post_attention_layernorm), each with its own weight.", "used one norm for both sublayers"),
    Fault("mlp_reads_x", "the feed-forward sublayer must read h = x + attention(...), the "
          "stream after the first residual add, not the block's input x.",
          "fed the MLP x instead of x + attention"),
    Fault("missing_attribute", "the block needs the attributes input_layernorm, self_attn, "
          "post_attention_layernorm and mlp (MiniMind's names).",
          "block lacks MiniMind's attribute names"),
    Fault("block_returns_input", "a block changes its input: forward must add the attention "
          "and feed-forward outputs to x, h = x + self_attn(input_layernorm(x)), then "
          "out = h + mlp(post_attention_layernorm(h)).", "block's forward returns its input"),
    Fault("sublayers_add_nothing", "the block's own self_attn and mlp add nothing to x: use "
          "CausalSelfAttention(dim, n_heads) and FeedForward(dim) from normref.",
          "block's sublayers add nothing to x"),
    Fault("module_weight", "the module needs self.weight = nn.Parameter(torch.ones(dim)) "
          "(gamma, initialised to ones) and no other parameter.",
          "RMSNorm module lacks weight = ones(dim)"),
    Fault("wrong_eps", "the default eps is wrong: RMSNorm(dim) uses eps=1e-6 (the seed's "
          "MiniMind).", "wrong default eps (RMSNorm: 1e-6)"),
    # ------------------------------------------------------------ lesson 04: Peri-LN, QK-norm, DyT
    Fault("out_norm_on_sum", "the output norm was applied to the sum x + F(...): Peri-LN normalizes "
          "the sublayer's output before the residual add, x + Norm(F(Norm(x))).",
          "normalized the sum, not F's output"),
    Fault("two_norms_swapped", "the two norms are swapped: each has its own place and its own weight.",
          "swapped the two norms"),
    Fault("one_norm_twice", "one norm was used on both sides and the other not at all: each side has "
          "its own norm.", "used one norm on both sides of F"),
    Fault("qk_one_side", "only one of q and k was normalized: QK-norm normalizes both.",
          "normalized only q or only k"),
    Fault("qk_no_scale", "the logits were not divided by sqrt(d), the head's width.",
          "left out the 1/sqrt(d) scale"),
    Fault("qk_wrong_scale", "the logits are divided by sqrt(d), the head's width.",
          "scaled the logits by d or sqrt(d) wrongly"),
    Fault("qk_no_transpose", "k must be transposed: the logits are q k^T, [..., T, T].",
          "did not transpose k"),
    Fault("qk_transposed", "that is k q^T: entry [..., i, j] of the logits is query i's logit for key j.",
          "returned the logits transposed"),
    Fault("qk_returned_softmax", "that is the softmax of the logits: return the logits themselves.",
          "returned the softmax, not the logits"),
    Fault("qk_masked", "the causal mask was applied: return the logits before any mask.",
          "applied the causal mask to the logits"),
    Fault("dyt_no_alpha", "alpha was not applied: DyT is weight * tanh(alpha * x) + bias.",
          "left alpha out of DyT"),
    Fault("dyt_alpha_outside", "alpha multiplies tanh's input, not its output: tanh(alpha * x).",
          "put alpha outside tanh"),
    Fault("dyt_bias_inside", "the bias is added after tanh and the weight: weight * tanh(alpha * x) + bias.",
          "added the bias inside tanh"),
    Fault("dyt_weight_bias_swapped", "weight and bias are swapped: weight * tanh(alpha * x) + bias.",
          "swapped DyT's weight and bias"),
    Fault("dyt_normalized", "DyT replaces the norm: it takes no statistics, tanh(alpha * x) of x itself.",
          "normalized x before DyT's tanh"),
    Fault("dyt_not_tanh", "DyT squashes with tanh: weight * tanh(alpha * x) + bias.",
          "used another squashing function than tanh"),
    # ------------------------------------------------------------ backward (numpy only)
    Fault("bwd_no_mean_term", "dx is missing the gradient through the mean: the mean depends on "
          "every x_i, so each dx_i also gets a share through it.", "backward: dx misses the mean term"),
    Fault("bwd_no_variance_term", "dx is missing the gradient through the variance: the variance "
          "depends on every x_i, so each dx_i also gets a share through it.",
          "backward: dx misses the variance term"),
    Fault("bwd_constant_stats", "dx treats the mean and the variance as constants: both depend "
          "on x, so the chain rule runs through each of them too.",
          "backward: mean and variance taken as constants"),
    Fault("bwd_dweight_dbias_swapped", "dweight and dbias are swapped: the bias is added to the "
          "output, so its gradient carries no normalised input; the weight multiplies it.",
          "backward: swapped dweight and dbias"),
    Fault("bwd_not_summed", "dweight and dbias sum over every axis but the last (batch and "
          "sequence), never over the features, so they have shape [D].",
          "backward: dweight/dbias not summed to [D]"),
    # ------------------------------------------------------------ rules that cost points
    Fault("reference_call", "the answer calls a library normalization instead of "
          "implementing it: grading gives this question 0; implement it with tensor operations.",
          "called a library norm instead of implementing it",
          numpy="the answer calls a library normalization instead of implementing it: grading "
          "gives this question 0; implement it with array operations."),
    # ------------------------------------------------------------ short answers only
    Fault("whole_block", "that formula has both of the block's residual sublayers, attention and "
          "the feed-forward network: it answers for the whole block, and the question asks for one "
          "sublayer.", "wrote the whole block, not one sublayer", source="answer"),
    Fault("not_answered", "not answered yet.", "left a question unanswered", source="answer"),
    Fault("bad_format", "the answer could not be read.", "wrote an answer that could not be read",
          source="answer"),
    Fault("sum_not_mean", "that is a sum: divide by the number of features d to get a mean.",
          "took a sum instead of a mean", source="answer"),
    Fault("uncentered_variance", "that is the mean of the squares: subtract the mean from each "
          "value before squaring.", "squared without subtracting the mean", source="answer"),
    Fault("sum_of_squares", "that is the sum of squared deviations: divide it by d.",
          "did not divide the squared deviations by d", source="answer"),
    Fault("missing_sqrt", "that is the mean square: RMS takes its square root.",
          "left out the square root of the RMS", source="answer"),
    Fault("l2_norm_not_rms", "that is the L2 norm sqrt(sum of squares): RMS divides the sum of "
          "squares by d before taking the root.", "gave the L2 norm instead of the RMS",
          source="answer"),
    Fault("mean_abs_not_rms", "that is the mean of the values: RMS is the root of the mean of "
          "the squares.", "gave the mean instead of the RMS", source="answer"),
    Fault("divided_outside_sqrt", "d was divided outside the square root: RMS = sqrt(sum of "
          "squares / d).", "divided by d outside the square root", source="answer"),
    Fault("not_scaled", "the values were centered but not divided by the standard deviation.",
          "centered but did not divide by the std", source="answer"),
    Fault("divided_by_variance", "divide by the standard deviation sqrt(variance), not by the "
          "variance.", "divided by the variance, not the std", source="answer"),
    Fault("says_shape_changes", "follow the shapes: work out the shape of the per-token "
          "statistic, mean(dim=-1, keepdim=True), then the shape that broadcasting it against x "
          "gives in x - mean or x / rms.",
          "thought normalization changes the shape", source="answer"),
    Fault("output_shape_not_statistic", "that is the shape of x (and of the output); rms is the "
          "per-token statistic, one number per token.",
          "gave x's shape for the per-token statistic", source="answer"),
    Fault("batch_axis", "statistics over the batch axis are BatchNorm's choice; LayerNorm and "
          "RMSNorm normalize one token at a time.", "normalized over the batch axis",
          source="answer"),
    Fault("sequence_axis", "statistics over the sequence axis would mix different tokens; each "
          "token is normalized on its own.", "normalized over the sequence axis", source="answer"),
]

#: Every fault kind, by name.
FAULTS: dict[str, Fault] = {f.kind: f for f in _TABLE}

#: Earlier names -> the kind they now are (notebooks graded before the merge carry them).
ALIASES: dict[str, str] = {a: f.kind for f in _TABLE for a in f.aliases}


def canonical(kind: str) -> str:
    """The registry's name for ``kind`` (itself, or what an earlier alias became)."""
    return ALIASES.get(kind, kind)


def message(kind: str, backend: str = "torch", norm: str = "layer") -> str:
    """The sentence a student reads for ``kind``, in ``backend``'s and ``norm``'s vocabulary
    (``norm="rms"``: RMSNorm's mean square where LayerNorm's words name the variance).

    Raises:
        KeyError: unknown kind. ValueError: unknown backend.
    """
    return FAULTS[canonical(kind)].text(backend, norm)


def label(kind: str) -> str:
    """The short report phrase for ``kind`` (or an alias of it). Raises KeyError if unknown."""
    return FAULTS[canonical(kind)].label


def kinds(source: str | None = None) -> list[str]:
    """Every kind, or those of one ``source`` (``"code"`` or ``"answer"``), in table order."""
    return [f.kind for f in _TABLE if source is None or f.source == source]


# --------------------------------------------------------------------------- the tag

_TAG_RE = re.compile(r"\[fault: ([a-z0-9_]+)\]")
_VARIANT_RE = re.compile(r"\[variant: ([^\]]+)\]")
_ANY_TAG_RE = re.compile(r"\s*\[(?:fault|variant): [^\]]+\]")


def format_tag(kind: str) -> str:
    """The text form of a fault tag, ``"[fault: <kind>]"`` (notebooks graded before the tags
    moved to output metadata carry it in their output text)."""
    return f"[fault: {kind}]"


def split_tags(text: str) -> tuple[str, list[str], list[str]]:
    """``(text without tags, fault kinds, variant ids)`` of a message that carries
    ``[fault: <kind>]`` / ``[variant: <id>]`` tags (the search of :mod:`normref.diagnosis` tags
    what it names; :func:`normref.checks.core.run` moves the tags out of the student's text)."""
    return _ANY_TAG_RE.sub("", text).rstrip(), _TAG_RE.findall(text), _VARIANT_RE.findall(text)


def output_metadata(faults, variants=()) -> dict:
    """The output metadata that carries a checker's fault kinds (and the variant ids the
    search named): ``{"normref": {"faults": [kind, ...], "variants": [id, ...]}}``."""
    meta = {"faults": list(faults)}
    if variants:
        meta["variants"] = list(variants)
    return {METADATA_KEY: meta}


def _output_text(out) -> str:
    if out.get("output_type") == "stream":
        text = out.get("text", "")
    else:
        text = out.get("data", {}).get("text/plain", "")
    return "".join(text) if isinstance(text, list) else text


def _outputs(source) -> list:
    if isinstance(source, dict):
        return source.get("outputs", [source])
    return list(source)


def parse_variants(source) -> list[str]:
    """The variant ids (:mod:`normref.diagnosis`) named in a cell, its outputs or one output:
    from the metadata ``{"normref": {"variants": [...]}}`` and ``[variant: <id>]`` text tags."""
    found: list[str] = []
    for out in ([] if isinstance(source, str) else _outputs(source)):
        meta = (out.get("metadata") or {}).get(METADATA_KEY) or {}
        found += [v for v in meta.get("variants", []) if isinstance(v, str)]
        found += _VARIANT_RE.findall(_output_text(out))
    if isinstance(source, str):
        found = _VARIANT_RE.findall(source)
    return list(dict.fromkeys(found))


def parse_tags(source) -> list[str]:
    """The fault kinds named in ``source``, in order of first appearance, without repeats.

    Args:
        source: a notebook cell (a dict with ``outputs``), a list of outputs, one output, or a
            string. From an output, both the metadata ``{"normref": {"faults": [...]}}`` and
            ``[fault: <kind>]`` tags in its text are read.

    Returns:
        Kinds as written (an earlier alias stays as it was tagged; :func:`canonical` maps
        it), keeping only kinds the registry knows.
    """
    if isinstance(source, str):
        found = _TAG_RE.findall(source)
    else:
        found = []
        for out in _outputs(source):
            meta = (out.get("metadata") or {}).get(METADATA_KEY) or {}
            found += [k for k in meta.get("faults", []) if isinstance(k, str)]
            found += _TAG_RE.findall(_output_text(out))
    out: list[str] = []
    for k in found:
        if (k in FAULTS or k in ALIASES) and k not in out:
            out.append(k)
    return out
