"""Lesson 04's pictures, drawn from what :mod:`normref.modern_experiments` computed.

Each ``plot_*`` returns a :class:`normref.plots.Plot` (figure, alt text, takeaway, the plotted
numbers in ``data``) like the other lessons' figures; every takeaway is computed from the numbers
it describes. One fixed colour, marker and line style per placement (Okabe-Ito), so no figure
depends on colour alone. matplotlib is imported inside the functions.
"""
from __future__ import annotations

import numpy as np

from .placements import PLACEMENTS
from .plot_style import OKABE_ITO, Plot, _figure, _takeaway

__all__ = ["PLACEMENT_STYLE", "plot_init_profiles", "plot_hidden_rms", "plot_training_curves",
           "plot_qk_logits", "plot_ln_map", "span"]

#: One style per placement (and per label the lesson trains).
PLACEMENT_STYLE = {
    "pre": dict(color=OKABE_ITO["blue"], marker="o", linestyle="-"),
    "peri": dict(color=OKABE_ITO["green"], marker="^", linestyle="-"),
    "output": dict(color=OKABE_ITO["purple"], marker="D", linestyle="-."),
    "post": dict(color=OKABE_ITO["vermillion"], marker="s", linestyle="--"),
    "deep": dict(color=OKABE_ITO["orange"], marker="v", linestyle=":"),
}


def _name(key: str) -> str:
    return PLACEMENTS[key][0] if key in PLACEMENTS else key


_BY_NAME = {name: key for key, (name, _) in PLACEMENTS.items()}


def _style(label: str, i: int = 0) -> dict:
    base = label.split(" ")[0]
    base = _BY_NAME.get(base, base)
    if base in PLACEMENT_STYLE:
        st = dict(PLACEMENT_STYLE[base])
        if "QK" in label:
            st.update(linestyle="-", marker="*")
        return st
    palette = [OKABE_ITO[k] for k in ("sky", "vermillion", "green", "purple", "orange", "blue")]
    return dict(color=palette[i % len(palette)], marker="ox^sDv"[i % 6], linestyle="-")


def span(values, fmt: str = ".2f") -> str:
    """``"0.81-0.85"`` (min-max of ``values``), or one number when they agree to ``fmt``."""
    v = np.asarray(values, dtype=np.float64)
    lo, hi = format(float(v.min()), fmt), format(float(v.max()), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def plot_init_profiles(init: dict) -> Plot:
    """Hidden-state RMS and W2 gradient norm per layer at initialisation, one line per placement.

    Args:
        init: :func:`normref.modern_experiments.init_profiles`' result.

    Returns:
        :class:`Plot`; ``data`` holds the per-seed arrays and ``rms_last``/``grad_ratio``
        (last/first layer) per placement, each ``[n_seeds]``.

    Raises:
        KeyError: ``init`` lacks ``"rms"`` or ``"grad"``.
    """
    fig = _figure(12, 4.4)
    axes = fig.subplots(1, 2)
    L = init["depth"]
    layers = np.arange(1, L + 1)
    data = {"rms": init["rms"], "grad": init["grad"], "rms_last": {}, "grad_ratio": {}}
    for key in init["rms"]:
        st = PLACEMENT_STYLE.get(key, _style(key))
        for ax, what in zip(axes, ("rms", "grad")):
            runs = np.asarray(init[what][key])
            ax.plot(layers, runs.mean(0), color=st["color"], marker=st["marker"], linestyle=st["linestyle"],
                    label=_name(key))
            if len(runs) > 1:
                ax.fill_between(layers, runs.min(0), runs.max(0), color=st["color"], alpha=0.12, linewidth=0)
        data["rms_last"][key] = np.asarray(init["rms"][key])[:, -1]
        g = np.asarray(init["grad"][key])
        data["grad_ratio"][key] = g[:, -1] / g[:, 0]
    axes[0].set_ylabel("hidden-state RMS after the layer (unitless)")
    axes[0].set_title(f"Hidden states at initialisation, {L} layers")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("‖∂loss/∂W2‖ of the layer (log scale)")
    axes[1].set_title("Gradient norm per layer at initialisation")
    for ax in axes:
        ax.set_xlabel("layer l (1 = nearest the input)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    r = {k: span(v) for k, v in data["rms_last"].items()}
    take = (f"after {L} layers the hidden-state RMS is {r.get('pre', '?')} in Pre-LN, {r.get('peri', '?')} in "
            f"Peri-LN, {r.get('output', '?')} in Output-LN and {r.get('post', '?')} in Post-LN and DeepNorm "
            f"(seeds {', '.join(map(str, init['seeds']))}); last/first-layer gradient: "
            + ", ".join(f"{_name(k)} {span(v)}" for k, v in data["grad_ratio"].items()) + ".")
    _takeaway(fig, take)
    alt = ("Two line charts against layer, one line per placement (mean over seeds, band: min to max): "
           "left, the RMS of the hidden state after each layer; right, the gradient norm of each layer's "
           "second feed-forward matrix at the first step, log scale.")
    return Plot(fig, alt, take, data)


def _by_lr(runs_by_lr: dict):
    return sorted(runs_by_lr.items(), key=lambda kv: kv[0])


def plot_hidden_rms(runs_by_lr: dict) -> Plot:
    """Hidden-state RMS per layer before and after a short training run, per placement, one panel
    per learning rate (log scale).

    Args:
        runs_by_lr: ``{lr: {label: [run per seed]}}`` from :func:`normref.modern_experiments.train_runs`.

    Returns:
        :class:`Plot`; ``data["final_last"][(lr, label)]`` and ``data["init_last"][(lr, label)]``:
        the last layer's RMS per seed after and before training.
    """
    items = _by_lr(runs_by_lr)
    fig = _figure(6.2 * len(items), 4.6)
    axes = np.atleast_1d(fig.subplots(1, len(items), squeeze=False)[0])
    data = {"final_last": {}, "init_last": {}}
    for ax, (lr, runs) in zip(axes, items):
        for i, (label, rs) in enumerate(runs.items()):
            st = _style(label, i)
            fin = np.array([r["rms_final"] for r in rs])
            ini = np.array([r["rms_init"] for r in rs])
            layers = np.arange(1, fin.shape[1] + 1)
            ax.plot(layers, fin.mean(0), color=st["color"], marker=st["marker"], linestyle=st["linestyle"],
                    label=f"{_name(label)}, trained")
            ax.fill_between(layers, fin.min(0), fin.max(0), color=st["color"], alpha=0.15, linewidth=0)
            ax.plot(layers, ini.mean(0), color=st["color"], linestyle=":", linewidth=1, alpha=0.8)
            data["final_last"][(lr, label)] = fin[:, -1]
            data["init_last"][(lr, label)] = ini[:, -1]
        ax.set_yscale("log")
        ax.set_xlabel("layer l (1 = nearest the input)")
        ax.set_ylabel("hidden-state RMS (log scale)")
        ax.set_title(f"After {rs[0]['steps']} Adam steps at lr {lr:g} (dotted: at init)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    parts = []
    for (lr, label), v in data["final_last"].items():
        before = span(data["init_last"][(lr, label)], ".1f")
        parts.append(f"{_name(label)} {before} -> {span(v, '.3g')} at lr {lr:g}")
    take = "last layer's hidden-state RMS, init -> trained (min-max over seeds): " + "; ".join(parts) + "."
    _takeaway(fig, take)
    panels = (f"at lr {items[0][0]:g}" if len(items) == 1 else
              "one panel per learning rate (" + ", ".join(f"{lr:g}" for lr, _ in items) + ")")
    alt = ("Line charts, log scale, of the hidden-state RMS after each layer of the tiny language model, "
           "one line per placement after training (band: min to max over seeds) and dotted at "
           f"initialisation, {panels}.")
    return Plot(fig, alt, take, data)


def plot_training_curves(runs_by_lr: dict) -> Plot:
    """Training loss per step, per configuration, every seed drawn; one panel per learning rate.

    Args:
        runs_by_lr: ``{lr: {label: [run per seed]}}``.

    Returns:
        :class:`Plot`; ``data["final"][(lr, label)]``: the final loss (mean of the last 10 steps)
        per seed.
    """
    from .modern_experiments import final_loss

    items = _by_lr(runs_by_lr)
    fig = _figure(6.2 * len(items), 4.6)
    axes = np.atleast_1d(fig.subplots(1, len(items), squeeze=False)[0])
    data = {"final": {}}
    for ax, (lr, runs) in zip(axes, items):
        for i, (label, rs) in enumerate(runs.items()):
            st = _style(label, i)
            for j, r in enumerate(rs):
                loss = np.asarray(r["loss"])
                steps = np.arange(1, len(loss) + 1)
                ax.plot(steps, loss, color=st["color"], linestyle=st["linestyle"], linewidth=1.4, alpha=0.85,
                        marker=st["marker"], markevery=max(1, len(loss) // 6), ms=4,
                        label=_name(label) if j == 0 else None)
            data["final"][(lr, label)] = np.array([final_loss(r) for r in rs])
        ax.axhline(np.log(2), color="black", linewidth=0.8, linestyle="-.", label="best possible, ln 2")
        ax.set_xlabel("training step")
        ax.set_ylabel("cross-entropy loss (nats per token)")
        ax.set_title(f"Adam at lr {lr:g}, {len(rs)} seeds each")
        top = max(float(np.nanmax(r["loss"])) for rs in runs.values() for r in rs)
        ax.set_ylim(0.5, max(3.2, min(8.0, top)))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, ncols=2)
    take = "final loss (mean of the last 10 steps, min-max over seeds): " + "; ".join(
        f"{_name(label)} {span(v)} at lr {lr:g}" for (lr, label), v in data["final"].items()) + "."
    _takeaway(fig, take)
    panels = (f"at lr {items[0][0]:g}" if len(items) == 1 else
              "one panel per learning rate (" + ", ".join(f"{lr:g}" for lr, _ in items) + ")")
    alt = (f"Line charts of training loss against step for each placement, one line per seed, {panels}; "
           "the dash-dotted line is the best possible loss, ln 2.")
    return Plot(fig, alt, take, data)


def plot_qk_logits(runs: dict) -> Plot:
    """The largest attention logit per training step, with and without QK-norm (log scale).

    Args:
        runs: ``{label: [run per seed]}`` (labels such as ``"pre"``, ``"pre + QK-norm"``).

    Returns:
        :class:`Plot`; ``data["peak"][label]``: the largest logit of each seed's run, and
        ``data["final"][label]`` its final loss.
    """
    from .modern_experiments import final_loss

    fig = _figure(8.5, 4.6)
    ax = fig.add_subplot()
    data = {"peak": {}, "final": {}}
    for i, (label, rs) in enumerate(runs.items()):
        st = _style(label, i)
        for j, r in enumerate(rs):
            m = np.asarray(r["max_logit"])
            ax.plot(np.arange(1, len(m) + 1), m, color=st["color"], linestyle=st["linestyle"], alpha=0.85,
                    marker=st["marker"], markevery=max(1, len(m) // 6), ms=5, label=label if j == 0 else None)
        data["peak"][label] = np.array([float(np.max(r["max_logit"])) for r in rs])
        data["final"][label] = np.array([final_loss(r) for r in rs])
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("largest |logit|, all layers and heads (log)")
    ax.set_title(f"Attention logits at lr {rs[0]['lr']:g}, with and without QK-norm")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    take = "largest logit of the run (min-max over seeds): " + "; ".join(
        f"{k} {span(v, '.3g')} (final loss {span(data['final'][k])})" for k, v in data["peak"].items()) + "."
    _takeaway(fig, take)
    alt = ("Line chart, log scale, of the largest absolute attention logit at each training step, one line "
           "per seed, for each configuration with and without QK-norm.")
    return Plot(fig, alt, take, data)


def _map_panel(ax, m: dict, rng, max_points: int) -> dict:
    """One norm's map (``m``, of :func:`normref.modern_experiments.layer_norm_maps`) on ``ax``:
    a subsample of its points, the fitted tanh and line; returns the fit."""
    x, y = np.ravel(m["x"]), np.ravel(m["y"])
    pick = rng.choice(x.size, size=min(max_points, x.size), replace=False)
    ax.scatter(x[pick], y[pick], s=3, color="#777777", alpha=0.35, linewidths=0,
               label="one feature of one token")
    grid = np.linspace(x.min(), x.max(), 400)
    ax.plot(grid, m["lam"] * np.tanh(m["alpha"] * grid), color=OKABE_ITO["vermillion"], linewidth=2,
            label=f"{m['lam']:.2f} tanh({m['alpha']:.3g} x), R² {m['r2_tanh']:.3f}")
    ax.plot(grid, m["slope"] * grid, color=OKABE_ITO["blue"], linewidth=1.5, linestyle="--",
            label=f"line {m['slope']:.3g} x, R² {m['r2_line']:.3f}")
    ax.set_xlabel("LayerNorm input x (one feature of one token)")
    ax.set_ylabel("output before gamma, beta")
    ax.set_title(f"{m['name']}")
    ax.set_ylim(-max(4.0, float(np.abs(y).max()) * 1.05), max(4.0, float(np.abs(y).max()) * 1.05))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return {k: m[k] for k in ("name", "alpha", "lam", "r2_tanh", "r2_line", "slope", "x_max")}


def _loss_panel(ax, ln_runs: list[dict], dyt_runs: list[dict]) -> dict:
    """The training loss of each LayerNorm and DyT run on ``ax``; returns their final losses
    ``{"LayerNorm": [seeds], "DyT": [seeds]}``."""
    from .modern_experiments import final_loss

    final = {}
    for label, rs, color, ls in (("LayerNorm", ln_runs, OKABE_ITO["blue"], "-"),
                                 ("DyT", dyt_runs, OKABE_ITO["orange"], "--")):
        for j, r in enumerate(rs):
            loss = np.asarray(r["loss"])
            ax.plot(np.arange(1, len(loss) + 1), loss, color=color, linestyle=ls, alpha=0.85,
                    label=f"{label} stack" if j == 0 else None)
        final[label] = np.array([final_loss(r) for r in rs])
    ax.axhline(np.log(2), color="black", linewidth=0.8, linestyle="-.", label="best possible, ln 2")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss (nats per token)")
    ax.set_title(f"Pre-LN stacks, LayerNorm vs DyT, lr {ln_runs[0]['lr']:g}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return final


def plot_ln_map(maps: list[dict], ln_runs: list[dict], dyt_runs: list[dict], *, show=None,
                max_points: int = 6000) -> Plot:
    """Zhu et al.'s scatter, small: LayerNorm's input against its output (before gamma and beta) in a
    trained tiny model, with the best ``lam * tanh(alpha x)`` and the best line; and the training loss
    of DyT stacks beside LayerNorm ones.

    Args:
        maps: :func:`normref.modern_experiments.layer_norm_maps` of one trained LayerNorm run.
        ln_runs, dyt_runs: runs per seed of the LayerNorm and the DyT model.
        show: indices of the two norms to draw (default: the one whose map the tanh explains best
            relative to the line, and the final norm).
        max_points: points drawn per scatter (a fixed subsample; every point is fitted).

    Returns:
        :class:`Plot`; ``data["fits"]``: the fits of the drawn norms; ``data["final"]``:
        ``{"LayerNorm": [...], "DyT": [...]}`` final losses per seed.
    """
    from .modern_experiments import tanh_gain

    gains = tanh_gain(maps)
    if show is None:
        show = [int(np.argmax(gains)), len(maps) - 1]
    fig = _figure(15, 4.6)
    axes = fig.subplots(1, 3)
    rng = np.random.default_rng(0)
    fits = [_map_panel(ax, maps[i], rng, max_points) for ax, i in zip(axes[:2], show)]
    final = _loss_panel(axes[2], ln_runs, dyt_runs)
    take = ("tanh vs line, share of the map explained: " + "; ".join(
        f"{f['name']} {f['r2_tanh']:.3f} vs {f['r2_line']:.3f}" for f in fits)
        + f" (all {len(maps)} norms: the tanh gains {gains.min():.3f} to {gains.max():.3f}); final loss "
        f"LayerNorm {span(final['LayerNorm'])}, DyT {span(final['DyT'])} (seeds "
        f"{', '.join(str(r['seed']) for r in ln_runs)}).")
    _takeaway(fig, take)
    alt = ("Two scatter plots of a trained LayerNorm's input against its normalised output, each with the "
           "best-fitting tanh curve (solid) and straight line (dashed); and a line chart of training loss "
           "for LayerNorm and DyT stacks, one line per seed.")
    return Plot(fig, alt, take, {"fits": fits, "final": final, "gains": gains, "shown": list(show)})
