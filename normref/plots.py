"""The lesson's pictures: every figure a notebook shows, drawn from numbers ``normref`` computes.

Each ``plot_*`` function returns a :class:`Plot`: the matplotlib ``Figure`` (built with
``matplotlib.figure.Figure``, not pyplot, so nothing is shown twice, no global state is touched
and it renders headless on Agg), its alt text, its one-line takeaway (said once, in the caption)
and ``data``, the exact numbers that were plotted (the tests read these). A notebook cell that
ends in a ``Plot`` shows it as an HTML ``<figure>`` with the PNG, the alt text on the ``<img>``
and a ``<figcaption>``; ``plot.save("/tmp/x.png")`` writes the PNG.

Colours are the Okabe-Ito palette (readable with every common colour-vision deficiency), and
each series also differs by marker, line style or hatching, so no figure depends on colour
alone.
The palette, the series' styles, :class:`Plot` and :func:`trend` live in
:mod:`normref.plot_style` and are re-exported here.

matplotlib is imported inside the functions, so ``import normref`` stays cheap.
"""
from __future__ import annotations

import numpy as np

from .plot_style import OKABE_ITO, SERIES_STYLE, Plot, _figure, _takeaway, trend  # noqa: F401 - re-exported

__all__ = [
    "OKABE_ITO",
    "SERIES_STYLE",
    "Plot",
    "draw_token_bars",
    "plot_token",
    "plot_batch_before_after",
    "plot_timing",
    "plot_residual_norms",
    "plot_grad_norms",
    "plot_training",
    "training_outcome",
    "training_takeaway",
    "trend",
]

# --------------------------------------------------------------------------- one token


def draw_token_bars(ax, x, y, *, title: str, ylim: float | None = None) -> dict:
    """Draw one token's input ``x`` and output ``y`` as grouped bars on ``ax``.

    Each series gets a horizontal line at its mean (dashed for the input, solid for the
    output) and a shaded band of mean +- one (biased) standard deviation.

    Args:
        ax: a matplotlib ``Axes`` (cleared first).
        x, y: 1-D sequences of the same length ``d`` (one token; float).
        title: axes title.
        ylim: symmetric y limit; default fits the data (at least 2.5).

    Returns:
        ``{"x", "y", "mean_x", "std_x", "mean_y", "std_y"}`` as plotted (float64).

    Raises:
        ValueError: ``x`` and ``y`` are not 1-D of one length.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"x and y must be 1-D of one length, got {x.shape} and {y.shape}")
    d = x.shape[0]
    ax.clear()
    idx = np.arange(d)
    w = 0.38
    stats = {}
    for key, vals, off, label in (("input", x, -w / 2, "input x"), ("output", y, w / 2, "output y")):
        st = SERIES_STYLE[key]
        m, s = float(vals.mean()), float(vals.std())
        ax.axhspan(m - s, m + s, color=st["color"], alpha=0.13, label=f"mean ± std of {label[-1]}")
        ax.bar(idx + off, vals, width=w, color=st["color"], hatch=st["hatch"], edgecolor="black",
               linewidth=0.6, label=label)
        ax.axhline(m, color=st["color"], linestyle=st["linestyle"], linewidth=1.8,
                   label=f"mean of {label[-1]}")
        stats[f"mean_{key[0]}"] = m
        stats[f"std_{key[0]}"] = s
    lim = ylim if ylim is not None else max(2.5, 1.15 * float(np.max(np.abs(np.r_[x, y]))))
    ax.set_ylim(-lim, lim)
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xticks(idx, [f"x[{i}]" for i in idx])
    ax.set_xlabel("feature r of the token (index)")
    ax.set_ylabel("value (unitless)")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.9)
    return {"x": x, "y": y, "mean_x": stats["mean_i"], "std_x": stats["std_i"],
            "mean_y": stats["mean_o"], "std_y": stats["std_o"]}


def plot_token(x, *, norm: str = "layer", weight: float = 1.0, bias: float = 0.0,
               eps: float | None = None) -> Plot:
    """One token before and after LayerNorm or RMSNorm, as bars with mean and +-std marked.

    Args:
        x: one token, 1-D sequence of ``d`` floats, e.g. the seed's ``(1, 2, 3)``.
        norm: ``"layer"`` or ``"rms"``.
        weight, bias: scalar gamma and beta broadcast over the features (bias: LayerNorm only).
        eps: default ``normref.LAYER_NORM_EPS`` / ``normref.RMS_NORM_EPS``.

    Returns:
        :class:`Plot`; ``data`` as :func:`draw_token_bars` returns it.

    Raises:
        ValueError: unknown ``norm``, or ``x`` not 1-D.

    Source: the seed's worked examples, LN(1,2,3) and RMSNorm(1,2,3).
    """
    y = normalize_token(x, norm=norm, weight=weight, bias=bias, eps=eps)
    fig = _figure(8, 4.2)
    name = _NAMES[norm]
    data = draw_token_bars(fig.add_subplot(), x, y, title=f"{name} of one token x = "
                           + "(" + ", ".join(f"{v:g}" for v in np.asarray(x, float)) + ")")
    if norm == "layer":
        take = f"LayerNorm moves the mean to {data['mean_y']:.3f} and the std to {data['std_y']:.3f}."
    else:
        take = (f"RMSNorm only rescales: the mean stays {data['mean_y']:.3f}, not 0; "
                f"the RMS becomes {float(np.sqrt(np.mean(y ** 2))):.3f}.")
    _takeaway(fig, take)
    alt = (f"Bar chart of the {len(data['x'])} features of one token: input x (orange, hatched) "
           f"and its {name} output y (blue), with horizontal lines at each mean and shaded "
           f"bands of mean ± one standard deviation.")
    return Plot(fig, alt, take, data)


_NAMES = {"layer": "LayerNorm", "rms": "RMSNorm"}


def normalize_token(x, *, norm: str, weight: float = 1.0, bias: float = 0.0,
                    eps: float | None = None) -> np.ndarray:
    """``normref.layer_norm`` / ``normref.rms_norm`` of one token with scalar gamma and beta.

    Args:
        x: 1-D sequence of ``d`` floats.
        norm: ``"layer"`` or ``"rms"`` (RMSNorm has no bias; ``bias`` is ignored for it).
        weight, bias: scalars, broadcast to ``[d]``.
        eps: default: the norm's ``normref`` default.

    Returns:
        ``[d]`` float64 numpy array.

    Raises:
        ValueError: unknown ``norm`` or ``x`` not 1-D.
    """
    from .functional import LAYER_NORM_EPS, RMS_NORM_EPS, layer_norm, rms_norm

    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"x must be one token, a 1-D vector; got shape {list(x.shape)}")
    w = np.full(x.shape, float(weight))
    if norm == "layer":
        return layer_norm(x, w, np.full(x.shape, float(bias)),
                          eps=LAYER_NORM_EPS if eps is None else eps)
    if norm == "rms":
        return rms_norm(x, w, eps=RMS_NORM_EPS if eps is None else eps)
    raise ValueError(f"norm must be 'layer' or 'rms', got {norm!r}")


# --------------------------------------------------------------------------- a batch


def _span(v) -> str:
    """``"1.000"`` when all of ``v`` rounds alike, else ``"0.998 to 1.000"``."""
    lo, hi = (f"{float(a):.3f}".replace("-0.000", "0.000") for a in (np.min(v), np.max(v)))
    return lo if lo == hi else f"{lo} to {hi}"


def demo_batch(seed: int = 16, shape=(2, 3, 8)) -> np.ndarray:
    """A ``[B, T, D]`` float64 batch whose tokens have visibly different means and scales.

    Token ``(b, t)`` is ``N(0, 1)`` noise times ``0.5 + b + t`` plus ``2 b - t``, so every
    token starts with its own mean and spread. Fixed seed.
    """
    b, t, d = shape
    g = np.random.default_rng(seed)
    bi, ti = np.meshgrid(np.arange(b), np.arange(t), indexing="ij")
    scale = (0.5 + bi + ti)[..., None]  # [B, T, 1]
    shift = (2.0 * bi - ti)[..., None]  # [B, T, 1]
    return g.standard_normal((b, t, d)) * scale + shift  # [B, T, D]


def plot_batch_before_after(x=None, *, norm: str = "layer") -> Plot:
    """A ``[B, T, D]`` batch before and after the norm: each token is normalised on its own.

    Left: heat map of the input, one row per token ``(b, t)``, one column per feature.
    Middle: the same after the norm. Right: each token's mean and std (RMSNorm: RMS) before
    (orange squares) and after (blue circles): after LayerNorm every token has mean 0 and std 1,
    after RMSNorm RMS 1, whatever the others hold, and the array keeps its ``[B, T, D]`` shape.

    Args:
        x: ``[B, T, D]`` array (numpy or torch); default :func:`demo_batch` (``[2, 3, 8]``).
        norm: ``"layer"`` or ``"rms"`` (weight 1, bias 0, the norm's default eps).

    Returns:
        :class:`Plot`; ``data`` holds ``x``, ``y`` (``[B, T, D]`` float64) and the per-token
        ``mean_x, std_x, mean_y, std_y, rms_x, rms_y`` (``[B*T]``, row order ``b`` major); the
        right panel plots the mean and the statistic the norm fixes: the std (LayerNorm) or the
        RMS (RMSNorm), the one the takeaway names.

    Raises:
        ValueError: ``x`` is not 3-D, or unknown ``norm``.
    """
    from .functional import layer_norm, rms_norm

    x = demo_batch() if x is None else np.asarray(x, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"x must be [B, T, D], got shape {list(x.shape)}")
    if norm not in _NAMES:
        raise ValueError(f"norm must be 'layer' or 'rms', got {norm!r}")
    y = layer_norm(x) if norm == "layer" else rms_norm(x)  # [B, T, D]
    B, T, D = x.shape
    flat_x, flat_y = x.reshape(B * T, D), y.reshape(B * T, D)  # one row per token
    labels = [f"b={b}, t={t}" for b in range(B) for t in range(T)]
    fig = _figure(12, 4.4)
    axes = fig.subplots(1, 3, width_ratios=[1, 1, 0.9])
    name = _NAMES[norm]
    _token_heat_maps(fig, axes[:2], flat_x, flat_y, (f"input x {list(x.shape)}", f"{name}(x) {list(y.shape)}"),
                     labels, T)
    st = {"mean_x": flat_x.mean(-1), "std_x": flat_x.std(-1), "mean_y": flat_y.mean(-1),
          "std_y": flat_y.std(-1), "rms_x": np.sqrt((flat_x ** 2).mean(-1)),
          "rms_y": np.sqrt((flat_y ** 2).mean(-1))}
    _token_stats(axes[2], st, norm, labels)
    if norm == "layer":
        take = (f"each token, on its own, ends with mean {_span(st['mean_y'])} and std "
                f"{_span(st['std_y'])}; the shape {list(y.shape)} is unchanged.")
    else:
        take = (f"each token, on its own, ends with RMS {_span(st['rms_y'])}, its mean not forced "
                f"to 0; the shape {list(y.shape)} is unchanged.")
    _takeaway(fig, take)
    alt = (f"Two heat maps of a {list(x.shape)} batch, one row per token and one column per "
           f"feature, before and after {name}, on a blue-white-red scale; and a dot plot of "
           f"each token's mean and {'standard deviation' if norm == 'layer' else 'RMS'} before (orange "
           f"squares) and after (blue circles).")
    return Plot(fig, alt, take, dict(x=x, y=y, **st))


def _token_heat_maps(fig, axes, flat_x, flat_y, titles, labels: list[str], T: int) -> None:
    """Heat maps of the tokens ``[B*T, D]`` before and after the norm, on one colour scale."""
    from matplotlib.colors import TwoSlopeNorm

    lim = float(np.abs(np.r_[flat_x.ravel(), flat_y.ravel()]).max())
    cnorm = TwoSlopeNorm(vcenter=0.0, vmin=-lim, vmax=lim)
    for ax, data, title in zip(axes, (flat_x, flat_y), titles):
        im = ax.imshow(data, cmap="RdBu_r", norm=cnorm, aspect="auto")
        ax.set_yticks(range(len(labels)), labels)
        ax.set_xticks(range(data.shape[1]))
        ax.set_xlabel("feature index r (D axis)")
        ax.set_ylabel("token (batch b, position t)")
        ax.set_title(title)
        for r in range(1, len(labels) // T):
            ax.axhline(r * T - 0.5, color="black", linewidth=1.5)
    fig.colorbar(im, ax=axes, label="value (unitless)", shrink=0.9)


def _token_stats(ax, st: dict, norm: str, labels: list[str]) -> None:
    """Each token's mean and the statistic the norm fixes (LayerNorm: the std; RMSNorm: the
    RMS), before and after."""
    spread = "std" if norm == "layer" else "rms"
    word = "std" if norm == "layer" else "RMS"
    rows = np.arange(len(labels))
    si, so = SERIES_STYLE["input"], SERIES_STYLE["output"]
    ax.plot(st["mean_x"], rows, si["marker"], color=si["color"], label="mean before", mfc="none", ms=8)
    ax.plot(st[f"{spread}_x"], rows, si["marker"], color=si["color"], label=f"{word} before", ms=8)
    ax.plot(st["mean_y"], rows, so["marker"], color=so["color"], label="mean after", mfc="none", ms=8)
    ax.plot(st[f"{spread}_y"], rows, so["marker"], color=so["color"], label=f"{word} after", ms=8)
    ax.axvline(0, color="gray", linewidth=0.6)
    ax.axvline(1, color="gray", linewidth=0.6, linestyle=":")
    ax.set_yticks(rows, labels)
    ax.invert_yaxis()
    ax.set_xlabel("statistic over the D features\n(unitless)")
    ax.set_ylabel("token (batch b, position t)")
    ax.set_title(f"per-token mean and {word}")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.24), ncols=2)


# --------------------------------------------------------------------------- cost


def plot_timing(timing: dict) -> Plot:
    """Bar chart of LayerNorm vs RMSNorm run time, as measured by
    :func:`normref.experiments.time_norms`.

    Args:
        timing: ``time_norms()``'s result: ``{"shape", "rows": [{"impl", "layer_us", "rms_us"}, ...]}``.

    Returns:
        :class:`Plot`; ``data["ratio"]`` is RMSNorm time / LayerNorm time per implementation.

    Raises:
        KeyError: ``timing`` lacks the keys above.
    """
    rows = timing["rows"]
    fig = _figure(7.5, 3.8)
    ax = fig.add_subplot()
    idx = np.arange(len(rows))
    w = 0.38
    for key, off, label in (("layer", -w / 2, "LayerNorm"), ("rms", w / 2, "RMSNorm")):
        st = SERIES_STYLE[key]
        vals = [r[f"{key}_us"] for r in rows]
        bars = ax.bar(idx + off, vals, width=w, color=st["color"], edgecolor="black",
                      hatch="" if key == "layer" else "..", label=label)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(idx, [r["impl"] for r in rows])
    ax.set_ylabel("time per call (microseconds)")
    ax.set_xlabel("implementation")
    ax.set_title(f"LayerNorm vs RMSNorm on this machine, x of shape {list(timing['shape'])}")
    ax.legend()
    ratio = {r["impl"]: r["rms_us"] / r["layer_us"] for r in rows}
    take = ("RMSNorm time / LayerNorm time: "
            + ", ".join(f"{k.split(' (')[0]} {v:.2f}x" for k, v in ratio.items()) + ".")
    _takeaway(fig, take)
    alt = ("Grouped bar chart of the time per call, in microseconds, of LayerNorm (blue) and "
           "RMSNorm (vermillion, dotted) for each implementation.")
    return Plot(fig, alt, take, {"ratio": ratio})


# --------------------------------------------------------------------------- placement


def _per_layer(ax, series: dict, *, ylabel: str, title: str, log: bool = False,
               xlabel: str = "layer l (1 = nearest the input)", x=None) -> None:
    for key in ("pre", "post"):
        if key not in series:
            continue
        st = SERIES_STYLE[key]
        vals = np.asarray(series[key], dtype=np.float64)
        xs = np.arange(1, len(vals) + 1) if x is None else np.asarray(x)
        ax.plot(xs, vals, marker=st["marker"], linestyle=st["linestyle"], color=st["color"],
                label=f"{key.capitalize()}-LN")
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)


def plot_residual_norms(norms: dict) -> Plot:
    """Residual-stream size after each layer at initialisation, Pre-LN vs Post-LN.

    Args:
        norms: ``{"pre": [L], "post": [L]}``: the mean L2 norm of one token of the hidden
            state after blocks 1..L (``placement_profiles()["residual"]``).

    Returns:
        :class:`Plot`; ``data`` is ``norms`` as float64 arrays.

    Raises:
        KeyError: ``norms`` lacks ``"pre"`` or ``"post"``.

    Source: Xiong et al. 2020, Lemma 2 (Pre-LN's hidden state grows with depth).
    """
    fig = _figure(7, 4)
    _per_layer(fig.add_subplot(), norms, ylabel="mean token norm ‖x‖₂ (unitless)",
               title="Residual stream size after each layer, at initialisation")
    pre, post = np.asarray(norms["pre"], float), np.asarray(norms["post"], float)
    take = (f"Pre-LN's stream grows layer by layer ({pre[0]:.1f} -> {pre[-1]:.1f}); Post-LN "
            f"renormalises it after every layer (its norm {trend(post[0], post[-1])}; sqrt(d) for LayerNorm).")
    _takeaway(fig, take)
    alt = ("Line chart of the mean L2 norm of a token of the residual stream after each layer, "
           "Pre-LN (blue circles, solid) and Post-LN (vermillion squares, dashed).")
    return Plot(fig, alt, take, {k: np.asarray(v, float) for k, v in norms.items()})


def plot_grad_norms(grads: dict, depth_sweep: dict | None = None) -> Plot:
    """Gradient norm of each layer's W2 at initialisation, Pre-LN vs Post-LN (Xiong et al. 2020).

    Left: per layer, for one depth. Right (with ``depth_sweep``): the last layer's gradient
    norm as the stack gets deeper, Xiong et al.'s Theorem 1.

    Args:
        grads: ``{"pre": [L], "post": [L]}``: the W2 gradient norm of blocks 1..L
            (``placement_profiles()["grad"]``).
        depth_sweep: optional ``{"depths", "pre", "post"}`` from
            :func:`normref.experiments.last_layer_grad_vs_depth`.

    Returns:
        :class:`Plot`; ``data`` holds the arrays, ``ratio`` (last / first layer, per
        placement) and, with a sweep, ``post_over_pre_last`` (Post-LN / Pre-LN at the
        deepest depth).

    Raises:
        KeyError: ``grads`` lacks ``"pre"`` or ``"post"``.

    Source: Xiong et al. 2020, Theorem 1 and Fig. 3.
    """
    fig = _figure(12 if depth_sweep else 7, 4.2)
    axes = fig.subplots(1, 2 if depth_sweep else 1, squeeze=False)[0]
    L = len(grads["pre"])
    _per_layer(axes[0], grads, ylabel="‖∂loss/∂W2‖ of the layer (log scale)",
               title=f"Gradient norm per layer at initialisation, {L} layers", log=True)
    ratio = {k: float(np.asarray(grads[k])[-1] / np.asarray(grads[k])[0]) for k in ("pre", "post")}
    data = {"pre": np.asarray(grads["pre"], float), "post": np.asarray(grads["post"], float),
            "ratio": ratio}
    out_ratio = data["post"][-1] / data["pre"][-1]
    side = (f"the output side gets {out_ratio:.1f}x more gradient in Post-LN" if out_ratio >= 1.05 else
            f"the output side gets {1 / out_ratio:.1f}x more gradient in Pre-LN" if out_ratio <= 1 / 1.05 else
            "the output side gets about the same gradient in both")
    take = f"last/first layer: Post-LN {ratio['post']:.2f}x, Pre-LN {ratio['pre']:.2f}x; {side}"
    take += _depth_panel(axes[1], depth_sweep, data) if depth_sweep else "."
    _takeaway(fig, take)
    alt = ("Line chart, log scale, of the gradient norm of each layer's second feed-forward "
           "matrix at initialisation, Pre-LN (blue circles, solid) and Post-LN (vermillion "
           "squares, dashed)" + (", and of the last layer's gradient norm against depth" if depth_sweep else "")
           + ".")
    return Plot(fig, alt, take, data)


def _depth_panel(ax, d: dict, data: dict) -> str:
    """The last layer's gradient norm against depth (``d``: ``{"depths", "pre", "post"}``) on
    ``ax``, with a 1/sqrt(L) guide; adds the sweep to ``data``; returns the takeaway's end."""
    _per_layer(ax, {"pre": d["pre"], "post": d["post"]}, x=d["depths"], log=True,
               ylabel="‖∂loss/∂W2‖ of the last layer (log scale)",
               xlabel="depth L (number of layers, log scale)",
               title="Last layer's gradient vs depth (Theorem 1)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(d["depths"], [str(v) for v in d["depths"]])
    pre0, pre1 = float(d["pre"][0]), float(d["pre"][-1])
    ref = pre0 * np.sqrt(d["depths"][0] / np.asarray(d["depths"], float))
    ax.plot(d["depths"], ref, color="gray", linestyle=":", label="∝ 1/sqrt(L)")
    ax.legend()
    data["post_over_pre_last"] = float(d["post"][-1] / d["pre"][-1])
    data["depth_sweep"] = {k: (np.asarray(v, float) if k != "depths" else list(v)) for k, v in d.items()}
    post0, post1 = float(d["post"][0]), float(d["post"][-1])
    post_says = ("Post-LN's does not shrink" if post1 >= 0.8 * post0
                 else f"Post-LN's shrinks {post0 / post1:.1f}x")
    return (f"; from L={d['depths'][0]} to {d['depths'][-1]} Pre-LN's last-layer gradient "
            f"shrinks {pre0 / pre1:.1f}x, {post_says}.")


#: A run "trains" when its final loss is within this many nats of the best possible, and
#: "stalls" when it is within it of the loss of guessing from the token frequencies alone.
TRAIN_MARGIN = 0.15


def training_outcome(final: float, optimal: float, unigram: float | None) -> str:
    """``"trains"``, ``"stalls"`` or ``"partway"``: what a final loss (nats) shows, against the
    best possible loss and the loss of predicting from token frequencies alone."""
    if final <= optimal + TRAIN_MARGIN:
        return "trains"
    if unigram is not None and final >= unigram - TRAIN_MARGIN:
        return "stalls"
    return "partway"


def training_takeaway(final: dict, optimal: float, unigram: float | None, depth: int | None = None) -> str:
    """The training figure's takeaway, from the final losses ``{(placement, warmup): nats}``:
    what each run shows (:func:`training_outcome`) and, from those outcomes alone, whether
    Post-LN needed warmup at this depth. Every branch states only what the numbers show."""
    explained = set()  # each level is explained the first time it is named

    def said(key):
        f = final[key]
        how = training_outcome(f, optimal, unigram)
        why = "" if how in explained else {
            "trains": f" (best possible {optimal:.2f})",
            "stalls": " (no better than guessing from how often each token occurs)",
            "partway": f", partway to the best possible {optimal:.2f}"}[how]
        explained.add(how)
        verb = {"trains": "trains to", "stalls": "stalls at", "partway": "gets to"}[how]
        return f"{verb} {f:.2f} nats{why}"

    parts = [f"{p.capitalize()}-LN {'with' if w else 'without'} warmup {said((p, w))}"
             for p, w in (("pre", False), ("post", False), ("post", True)) if (p, w) in final]
    take = "; ".join(parts) + " (each the mean loss of the last 10 steps)"
    if ("post", False) in final and ("post", True) in final:
        cold = training_outcome(final[("post", False)], optimal, unigram)
        warm = training_outcome(final[("post", True)], optimal, unigram)
        at = f" at {depth} layers" if depth else ""
        if cold == "trains":
            take += f". Post-LN needs no warmup{at}"
        elif warm == "stalls":
            take += f". Warmup of this length does not rescue Post-LN{at}"
        elif final[("post", True)] < final[("post", False)] - TRAIN_MARGIN:
            take += f". Warmup lets Post-LN train{at}"
    return take + "."


def plot_training(curves: dict) -> Plot:
    """Training loss of Pre-LN and Post-LN, with and without learning-rate warmup.

    Args:
        curves: :func:`normref.experiments.train_placements`' result:
            ``{(placement, warmup): [steps] losses, "optimal": float, "warmup": int, ...}``.

    Returns:
        :class:`Plot`; ``data["final"][(placement, warmup)]`` is the mean loss of the last 10
        steps, ``data["outcome"]`` what each shows (:func:`training_outcome`); the takeaway is
        :func:`training_takeaway`'s.
    """
    fig = _figure(8, 4.4)
    ax = fig.add_subplot()
    final = {}
    for (placement, warm), losses in ((k, v) for k, v in curves.items() if isinstance(k, tuple)):
        st = SERIES_STYLE[placement]
        losses = np.asarray(losses, dtype=np.float64)
        steps = np.arange(1, len(losses) + 1)
        ax.plot(steps, losses, color=st["color"], linestyle="-" if warm else ":",
                marker=st["marker"], markevery=max(1, len(losses) // 8), ms=5,
                mfc=st["color"] if warm else "white",
                label=f"{placement.capitalize()}-LN, {'with' if warm else 'no'} warmup")
        final[(placement, warm)] = float(losses[-10:].mean())
    if "optimal" in curves:
        ax.axhline(curves["optimal"], color="black", linewidth=0.8, linestyle="-.",
                   label=f"best possible, ln 2 = {curves['optimal']:.3f}")
    if "unigram" in curves:
        ax.axhline(curves["unigram"], color="gray", linewidth=0.8, linestyle=(0, (1, 3)),
                   label=f"guessing from token frequencies, {curves['unigram']:.2f}")
    if curves.get("warmup"):
        ax.axvline(curves["warmup"], color="gray", linewidth=0.8, linestyle="--",
                   label=f"end of warmup (step {curves['warmup']})")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss (nats per token)")
    depth = f", {curves['depth']} layers" if "depth" in curves else ""
    lr = f", Adam lr {curves['lr']:g}" if "lr" in curves else ""
    ax.set_title(f"Tiny language model{depth}{lr}: who needs warmup?")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    take = training_takeaway(final, curves.get("optimal", float(np.log(2.0))), curves.get("unigram"),
                             curves.get("depth"))
    _takeaway(fig, take)
    alt = ("Line chart of training loss against step for Pre-LN (blue circles) and Post-LN "
           "(vermillion squares), solid with learning-rate warmup and dotted without.")
    outcome = {k: training_outcome(v, curves.get("optimal", float(np.log(2.0))), curves.get("unigram"))
               for k, v in final.items()}
    return Plot(fig, alt, take, {"final": final, "outcome": outcome})
