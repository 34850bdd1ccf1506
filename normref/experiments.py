"""The lesson's measurements: the numbers the notebooks show and the plots draw.

- :func:`invariance_table`: Ba et al. 2016's Table 1 (what re-scaling and re-centering leave
  unchanged), measured for LayerNorm and RMSNorm rather than typed in.
- :func:`float16_overflow_demo`: why statistics are computed in float32 (the seed's
  Engineering bridge): ``x**2`` overflows float16 and the output collapses to zero.
- :func:`time_norms`: what LayerNorm and RMSNorm cost on the machine running the notebook.
- :func:`residual_norms`, :func:`grad_norms`, :func:`train_placements`: Pre-LN vs Post-LN at
  initialisation and in a tiny training run (Xiong et al. 2020).

Everything is seeded and CPU-sized (seconds).
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field

import numpy as np

from .functional import RMS_NORM_EPS, layer_norm, rms_norm

__all__ = [
    "InvarianceTable",
    "invariance_table",
    "float16_overflow_demo",
    "time_norms",
    "RMSNORM_PAPER_CLAIM",
]

#: Zhang and Sennrich 2019, abstract. Stated beside the local measurement, never asserted.
RMSNORM_PAPER_CLAIM = (
    "Zhang and Sennrich (2019) report that RMSNorm \"achieves comparable performance against "
    "LayerNorm but reduces the running time by 7%~64% on different models\" (their GPU "
    "implementations, whole-model training time)."
)


# --------------------------------------------------------------------------- invariance


@dataclass
class InvarianceTable:
    """Which transformations leave a norm's output unchanged, measured.

    Attributes:
        transforms: ``[(name, description)]`` in row order.
        norms: column names, ``["LayerNorm", "RMSNorm"]``.
        max_change: ``{(transform, norm): max |Norm(after) - Norm(before)|}`` (float64).
        tol: the change below which an output counts as unchanged.
    """

    transforms: list[tuple[str, str]]
    norms: list[str]
    max_change: dict = field(default_factory=dict)
    tol: float = 1e-9

    def invariant(self, transform: str, norm: str) -> bool:
        """True when ``norm``'s output did not change under ``transform`` (within ``tol``)."""
        return self.max_change[(transform, norm)] <= self.tol

    def as_dict(self) -> dict:
        """``{transform: {norm: bool}}``."""
        return {t: {n: self.invariant(t, n) for n in self.norms} for t, _ in self.transforms}

    def to_html(self) -> str:
        """An HTML table: a tick (invariant) or a cross (changes) with the measured change."""
        head = "".join(f"<th>{html.escape(n)}</th>" for n in self.norms)
        rows = []
        for t, desc in self.transforms:
            cells = []
            for n in self.norms:
                ch = self.max_change[(t, n)]
                mark = "&#10004; invariant" if self.invariant(t, n) else "&#10008; changes"
                cells.append(f"<td>{mark}<br/><small>max |&Delta;| = {ch:.1e}</small></td>")
            rows.append(f"<tr><td><b>{html.escape(t)}</b><br/><small>{html.escape(desc)}"
                        f"</small></td>{''.join(cells)}</tr>")
        return (f"<table><caption>Measured: does the output change? (float64, eps = 0, "
                f"tolerance {self.tol:g})</caption><thead><tr><th>transformation</th>{head}"
                f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")

    def _repr_html_(self) -> str:
        return self.to_html()

    def __str__(self) -> str:
        w = max(len(t) for t, _ in self.transforms)
        lines = [f"{'transformation':<{w}}  " + "  ".join(f"{n:<10}" for n in self.norms)]
        for t, _ in self.transforms:
            marks = ["invariant" if self.invariant(t, n) else "changes" for n in self.norms]
            lines.append(f"{t:<{w}}  " + "  ".join(f"{m:<10}" for m in marks))
        return "\n".join(lines)


_TRANSFORMS = [
    ("token re-scaling", "one token x -> 3 x (the norm applied to x itself)"),
    ("token re-centering", "one token x -> x + 5 (the same shift on every feature)"),
    ("weight matrix re-scaling", "W -> 3 W, where the norm is applied to a = W x"),
    ("weight matrix re-centering", "W -> W + 1 g^T: every row of W gets the same vector g"),
    ("weight vector re-scaling", "one row of W -> 3 x that row"),
    ("dataset re-scaling", "every input x -> 3 x"),
    ("dataset re-centering", "every input x -> x + g, the same vector g"),
    ("single training case re-scaling", "one input x -> 3 x, the others unchanged"),
]


def invariance_table(*, seed: int = 0, delta: float = 3.0, tol: float = 1e-9) -> InvarianceTable:
    """Measure Ba et al. 2016's invariance table for LayerNorm and RMSNorm.

    A linear layer ``a = W x`` (``W`` ``[5, 6]``, a batch of 4 inputs ``x`` ``[6]``, float64,
    fixed seed) feeds the norm (``eps = 0``, weight 1, bias 0). Each transformation (the rows
    of Ba et al.'s Table 1, plus re-scaling and re-centering of one token fed to the norm
    directly) is applied and the largest change of the norm's output is recorded.

    Args:
        seed: numpy seed for ``W``, the inputs and the shift vector ``g``.
        delta: the re-scaling factor (any value != 1; 3 by default).
        tol: a change at most this large counts as "invariant".

    Returns:
        :class:`InvarianceTable`; display it in a notebook for the table of ticks.

    Source: Ba, Kiros and Hinton 2016, "Layer Normalization", Table 1 and section 5.1;
    Zhang and Sennrich 2019, Table 1 (RMSNorm).
    """
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((5, 6))  # [d_out, d_in]
    X = rng.standard_normal((4, 6)) + 0.5  # [N, d_in]
    g = rng.standard_normal(6)  # [d_in]
    norms = {"LayerNorm": lambda a: layer_norm(a, eps=0.0), "RMSNorm": lambda a: rms_norm(a, eps=0.0)}

    def through(W_, X_):
        return X_ @ W_.T  # [N, d_out]

    W1 = W.copy()
    W1[0] *= delta
    X1 = X.copy()
    X1[0] *= delta
    pairs = {
        "token re-scaling": (X, delta * X),
        "token re-centering": (X, X + 5.0),
        "weight matrix re-scaling": (through(W, X), through(delta * W, X)),
        "weight matrix re-centering": (through(W, X), through(W + g[None, :], X)),
        "weight vector re-scaling": (through(W, X), through(W1, X)),
        "dataset re-scaling": (through(W, X), through(W, delta * X)),
        "dataset re-centering": (through(W, X), through(W, X + g[None, :])),
        "single training case re-scaling": (through(W, X), through(W, X1)),
    }
    table = InvarianceTable(list(_TRANSFORMS), list(norms), tol=tol)
    for t, (before, after) in pairs.items():
        for n, f in norms.items():
            table.max_change[(t, n)] = float(np.abs(f(after) - f(before)).max())
    return table


# --------------------------------------------------------------------------- float16


def float16_overflow_demo(x=(300.0, -300.0, 300.0, -300.0), eps: float = RMS_NORM_EPS) -> dict:
    """RMSNorm of a float16 token two ways: statistics in float16 (broken) vs float32 (the seed).

    ``300**2 = 90000`` is above float16's largest finite value, 65504 (so is any ``|x| >= 256``):
    in float16 ``x**2`` is ``inf``, the mean square is ``inf``, ``rsqrt(inf) = 0`` and the
    output collapses to zeros. Computing the statistic in float32 (``x.float()``) and casting
    back gives the right answer, ``(1, -1, 1, -1)``.

    Args:
        x: one token (1-D floats), stored as float16.
        eps: RMSNorm's eps.

    Returns:
        dict of torch tensors: ``x`` (float16), ``x_sq_fp16`` (``x**2`` in float16),
        ``mean_sq_fp16``, ``y_fp16_stats`` (float16 statistics, the bug), ``x_sq_fp32``,
        ``mean_sq_fp32``, ``y_fp32_stats`` (``normref.rms_norm``, float16 out), and
        ``fp16_max`` (float).

    Source: the seed's Engineering bridge ("compute their statistics in float32, then cast
    the normalized result back"); ``normref.checks.FAULT_KINDS["low_precision_stats"]``.
    """
    import torch

    x16 = torch.tensor(x, dtype=torch.float16)
    sq16 = x16.pow(2)  # float16: overflows to inf where |x| >= 256
    ms16 = sq16.mean(dim=-1, keepdim=True)  # [1]
    y16 = x16 * torch.rsqrt(ms16 + eps)  # float16 all the way: the bug
    sq32 = x16.float().pow(2)
    ms32 = sq32.mean(dim=-1, keepdim=True)  # [1]
    return {
        "x": x16,
        "x_sq_fp16": sq16,
        "mean_sq_fp16": ms16,
        "y_fp16_stats": y16,
        "x_sq_fp32": sq32,
        "mean_sq_fp32": ms32,
        "y_fp32_stats": rms_norm(x16, eps=eps),
        "fp16_max": float(torch.finfo(torch.float16).max),
    }


# --------------------------------------------------------------------------- cost


def time_norms(shape=(8, 64, 256), *, repeats: int = 15, number: int = 20, num_threads: int = 1) -> dict:
    """Time LayerNorm and RMSNorm on this machine (CPU), two ways each.

    - ``"eager ops (normref)"``: :func:`normref.layer_norm` vs :func:`normref.rms_norm`, both
      written in the same plain torch ops: like for like, RMSNorm skips the mean and the
      subtraction.
    - ``"fused (torch.nn.functional)"``: ``F.layer_norm`` (one fused C++ kernel) vs
      ``F.rms_norm`` (on CPU in torch 2.x, several ops): the kernel matters as much as the maths.

    The four statements are timed in turn, ``repeats`` rounds of ``number`` calls each, and
    the fastest round is kept: on a shared machine other work only ever adds time, so the
    minimum is the least noisy estimate.

    Args:
        shape: ``[B, T, D]`` of the float32 input (fixed seed).
        repeats: rounds per statement.
        number: calls per round.
        num_threads: torch threads during the measurement.

    Returns:
        ``{"shape", "num_threads", "rows": [{"impl", "layer_us", "rms_us"}]}``, microseconds
        per call.

    Source: RMSNorm's efficiency claim, Zhang and Sennrich 2019 (see ``RMSNORM_PAPER_CLAIM``).
    """
    import torch
    import torch.nn.functional as F
    from torch.utils import benchmark

    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)  # [B, T, D]
    d = shape[-1]
    w, b = torch.ones(d), torch.zeros(d)
    env = dict(F=F, x=x, w=w, b=b, d=d, layer_norm=layer_norm, rms_norm=rms_norm)
    cases = {
        ("eager ops (normref)", "layer"): "layer_norm(x, w, b)",
        ("eager ops (normref)", "rms"): "rms_norm(x, w)",
        ("fused (torch.nn.functional)", "layer"): "F.layer_norm(x, (d,), w, b, 1e-5)",
        ("fused (torch.nn.functional)", "rms"): "F.rms_norm(x, (d,), w, 1e-6)",
    }
    timers = {k: benchmark.Timer(stmt, globals=env, num_threads=num_threads) for k, stmt in cases.items()}
    best = {k: float("inf") for k in cases}
    for t in timers.values():  # warm-up: first calls pay for allocation and dispatch caches
        t.timeit(number)
    for _ in range(repeats):
        for k, t in timers.items():
            best[k] = min(best[k], t.timeit(number).mean * 1e6)
    impls = list(dict.fromkeys(k[0] for k in cases))
    rows = [{"impl": i, "layer_us": best[(i, "layer")], "rms_us": best[(i, "rms")]} for i in impls]
    return {"shape": tuple(shape), "num_threads": num_threads, "rows": rows}
