"""The ``batchnorm`` assignment's answer bank: the demo class's answers and the points each must get.

``ANSWERS[variant]`` maps an answer cell's grade_id to what a synthetic student typed there
(a grade_id left out keeps the release stub); ``EXPECTED[variant]`` gives every grade cell's
points, each derived by hand (the comment beside it), never by running the grader
(``tests/test_assignments.py`` asserts them; ``grader/demo`` builds the demo class from them).

Battery cases the derivations refer to (``batchnorm_check.public_battery``; grading draws cases of
the same kinds, ``grading.draw_batchnorm_battery``), 4/7 point each in ``batch_norm_battery``
(rounded to 2 decimals: 1/7 -> 0.57, 2/7 -> 1.14, 4/7 -> 2.29, 5/7 -> 2.86, 6/7 -> 3.43):
1 training, no padding; 2 training, the last 2 tokens of one sequence padding (filled with
large values); 3 evaluation with running averages, no padding; 4 ``B = T = D`` training with
padding; 5 float16 training, a spread of 200 or more (its squares overflow float16's 65504);
6 training with another momentum, no padding; 7 one real token in training (must raise
ValueError). Each training case compares ``y`` (0 at padding), then ``new_running_mean``, then
``new_running_var``; the evaluation case compares ``y`` and the running averages handed back
unchanged. ``batch_norm_quick`` gives its point when cases 1 and 2 both pass.
"""
from __future__ import annotations

_HEAD = ('def batch_norm(x, weight, bias, running_mean, running_var, mask=None, training=True, momentum=0.1, '
         'eps=1e-5):\n')
_REAL = ("    real = torch.ones(x.shape[:2], dtype=torch.bool) if mask is None else mask.bool()  # [B, T]\n"
         "    w = real[..., None].float()  # [B, T, 1]\n"
         "    xf = x.float()\n")
_TRAIN = ("    if training:\n"
          "        n = int(real.sum())\n"
          "        if n < 2:\n"
          "            raise ValueError(f'BatchNorm needs two real tokens, got {n}')\n"
          "        mean = (xf * w).sum(dim=(0, 1)) / n  # [D]\n"
          "        var = ((xf - mean) ** 2 * w).sum(dim=(0, 1)) / n\n")
_UPDATE = ("        new_mean = (1 - momentum) * running_mean + momentum * mean\n"
           "        new_var = (1 - momentum) * running_var + momentum * var * n / (n - 1)\n")
_EVAL = ("    else:\n"
         "        mean, var = running_mean.float(), running_var.float()\n"
         "        new_mean, new_var = running_mean, running_var\n")
_OUT = ("    y = (xf - mean) / torch.sqrt(var + eps) * weight + bias  # [B, T, D]\n"
        "    return (y * w).to(x.dtype), new_mean, new_var\n")


def _bn(real: str = _REAL, train: str = _TRAIN, update: str = _UPDATE, ev: str = _EVAL, out: str = _OUT) -> dict:
    return {"batch_norm_impl": _HEAD + real + train + update + ev + out}


_ANSWERS = {
    "correct": _bn(),
    "blank": {},
    # training right; evaluation not written yet
    "partial": _bn(ev="    else:\n        raise NotImplementedError('evaluation mode')\n"),
    # the padding enters the statistics (and its outputs are normalised like real tokens)
    "ignores_mask": _bn(real="    real = torch.ones(x.shape[:2], dtype=torch.bool)  # every token counted\n"
                             "    w = real[..., None].float()\n    xf = x.float()\n"),
    # each token's statistics over its own features, LayerNorm's axis
    "per_token_stats": _bn(train=_TRAIN.replace(
        "        mean = (xf * w).sum(dim=(0, 1)) / n  # [D]\n"
        "        var = ((xf - mean) ** 2 * w).sum(dim=(0, 1)) / n\n",
        "        mean = xf.mean(dim=-1, keepdim=True)  # [B, T, 1]: one token's features\n"
        "        var = xf.var(dim=-1, unbiased=False, keepdim=True)\n"),
        update="        new_mean = (1 - momentum) * running_mean + momentum * mean.mean()\n"
               "        new_var = (1 - momentum) * running_var + momentum * var.mean()\n"),
    # the running variance updated with the biased variance (BatchNorm1d keeps the unbiased one)
    "biased_running_var": _bn(update=_UPDATE.replace("var * n / (n - 1)", "var")),
    # evaluation normalises with the batch's own statistics, like training
    "eval_uses_batch_stats": _bn(train=_TRAIN.replace("    if training:\n", "    if True:  # both modes\n"),
                                 update=_UPDATE.replace("        new_mean =", "        if not training:\n"
                                                        "            return ((xf - mean) / torch.sqrt(var + eps) * "
                                                        "weight + bias).to(x.dtype) * w.to(x.dtype), running_mean, "
                                                        "running_var\n        new_mean =")),
    # the padded positions keep their normalised values instead of 0
    "padding_not_zeroed": _bn(out=_OUT.replace("    return (y * w).to(x.dtype), new_mean, new_var\n",
                                               "    return y.to(x.dtype), new_mean, new_var\n")),
    # the momentum weighs the old average instead of the new statistic
    "momentum_reversed": _bn(update="        new_mean = momentum * running_mean + (1 - momentum) * mean\n"
                                    "        new_var = momentum * running_var + (1 - momentum) * var * n / (n - 1)\n"),
    # the statistics in the input's dtype: float16 squares overflow
    "stats_in_float16": _bn(real=_REAL.replace("    xf = x.float()\n", "    xf = x  # no cast: float16 stays\n")
                               .replace("    w = real[..., None].float()  # [B, T, 1]\n",
                                        "    w = real[..., None].to(x.dtype)  # [B, T, 1]\n")),
    # one real token: no error, the unbiased variance divides by n - 1 = 0
    "no_value_error": _bn(train=_TRAIN.replace("        if n < 2:\n"
                                               "            raise ValueError(f'BatchNorm needs two real tokens, "
                                               "got {n}')\n", "")),
}

_FULL = {"batch_norm_quick": 1.0, "batch_norm_battery": 4.0}


def _e(**points: float) -> dict[str, float]:
    return {**_FULL, **points}


_EXPECTED = {
    "correct": _e(),
    # the stub raises NotImplementedError: the visible check fails; case 7 wants ValueError: 0 of 7
    "blank": _e(batch_norm_quick=0.0, batch_norm_battery=0.0),
    # 3 (evaluation) raises NotImplementedError; the others, 7 included, as correct: 6 of 7
    "partial": _e(batch_norm_battery=3.43),
    # 1, 3, 5, 6 have no padding: right; 2 and 4 count the padding; 7: two tokens counted, no error;
    # the visible check fails on case 2: 4 of 7
    "ignores_mask": _e(batch_norm_quick=0.0, batch_norm_battery=2.29),
    # every training y is wrong (1, 2, 4, 5, 6); 3 (evaluation) and 7 (raises) right: 2 of 7
    "per_token_stats": _e(batch_norm_quick=0.0, batch_norm_battery=1.14),
    # y right everywhere, new_running_var wrong in every training case (1, 2, 4, 5, 6): 2 of 7
    "biased_running_var": _e(batch_norm_quick=0.0, batch_norm_battery=1.14),
    # only 3 (evaluation) is wrong; the visible check's cases 1 and 2 train: 6 of 7
    "eval_uses_batch_stats": _e(batch_norm_battery=3.43),
    # the padded outputs are not 0 in 2 and 4 (7 raises first): 5 of 7; the visible check fails on case 2
    "padding_not_zeroed": _e(batch_norm_quick=0.0, batch_norm_battery=2.86),
    # the running averages are wrong in every training case (1, 2, 4, 5, 6): 2 of 7
    "momentum_reversed": _e(batch_norm_quick=0.0, batch_norm_battery=1.14),
    # float16's squares overflow in 5 only (the others are float32): 6 of 7
    "stats_in_float16": _e(batch_norm_battery=3.43),
    # 7 returns a value where it must raise: 6 of 7
    "no_value_error": _e(batch_norm_battery=3.43),
}

ANSWERS = _ANSWERS
EXPECTED = _EXPECTED
