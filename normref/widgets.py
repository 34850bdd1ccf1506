"""The lesson's interactive widgets (ipywidgets), built so they also work with no browser.

Each explorer renders its figure with matplotlib's Agg backend into an ``ipywidgets.Image``
(PNG bytes) and prints its numbers into an ``ipywidgets.HTML`` readout, so it builds and
updates the same way in JupyterLab, in a headless ``nbclient`` run, under ``nbgrader`` and in
a plain Python test (set a slider's ``.value``; the callback runs synchronously). Nothing
waits for a front end, so nothing can hang.

Stable handles for tests and for a browser driving the page:

- every control has a fixed ``description`` (listed in each class's docstring);
- the readout is an ``HTML`` widget with CSS class ``normref-readout`` holding one ``<pre>``
  whose lines have the fixed form documented in each class (``name = value``, numbers with
  three decimals, vectors as ``[a, b, c]``);
- the picture is an ``Image`` widget with CSS class ``normref-plot``; the ``HTML`` caption
  below it (CSS class ``normref-caption``) describes it in words (its alt text). The ``Image``
  gets no ``tooltip``: ipywidgets 8.1.9's front end cannot build the view of a widget that has
  a tooltip but no ``description`` (jupyter-widgets/ipywidgets#3921).

ipywidgets and matplotlib are imported inside the classes, so ``import normref`` stays cheap.
"""
from __future__ import annotations

import html
import re

import numpy as np

from .plots import draw_token_bars, normalize_token, trend

__all__ = ["NormExplorer", "PlacementExplorer", "LearningRateExplorer", "LEARNING_RATES", "fmt_vector",
           "fmt_number", "parse_readout", "trend"]

_NORM_NAMES = {"layer": "LayerNorm", "rms": "RMSNorm"}


def fmt_number(v: float) -> str:
    """Three decimals, and never ``-0.000``."""
    s = f"{float(v):.3f}"
    return "0.000" if s == "-0.000" else s


def fmt_vector(v) -> str:
    """``[a, b, c]`` with :func:`fmt_number` entries."""
    return "[" + ", ".join(fmt_number(a) for a in np.asarray(v, dtype=np.float64).ravel()) + "]"


def parse_readout(text: str) -> dict:
    """Parse a readout (the ``<pre>`` text, or the widget's HTML) back into numbers.

    Lines ``name = value`` separated by runs of three spaces; a value in brackets becomes a
    list of floats, a number a float, anything else stays a string. This is the inverse of
    what the explorers print, for tests and browser checks.

    Args:
        text: the readout text; HTML tags are stripped first.

    Returns:
        ``{name: value}``, e.g. ``{"norm": "LayerNorm", "y": [-1.225, 0.0, 1.225], ...}``.
    """

    text = html.unescape(re.sub(r"<[^>]+>", "", text))
    out: dict = {}
    for line in text.splitlines():
        for part in re.split(r"\s{3,}", line.strip()):
            if " = " not in part:
                continue
            k, v = part.split(" = ", 1)
            v = v.strip()
            if v.startswith("[") and v.endswith("]"):
                out[k.strip()] = [float(a) for a in v[1:-1].split(",") if a.strip()]
            else:
                try:
                    out[k.strip()] = float(v)
                except ValueError:
                    out[k.strip()] = v
    return out


#: The explorers' PNGs are drawn at twice the figure's 90 dpi, so that a chart shown ``width``
#: CSS pixels wide has two image pixels per CSS pixel (sharp on high-density screens and
#: when the browser zooms); at 90 dpi PlacementExplorer's 10-inch figure was 900 pixels shown at 860.
PNG_DPI = 180


def _indefinite(n: int) -> str:
    """``"an 8"``, ``"an 11"``, ``"a 12"``: the article a number takes when read aloud."""
    spoken = str(n)
    an = spoken.startswith("8") or (len(spoken) in (2, 5) and spoken[:2] in ("11", "18"))
    return f"{'an' if an else 'a'} {n}"


def _layer_span(depth: int) -> str:
    """``"from layer 1 to layer 8"``, or ``"after its one layer"`` for a 1-layer stack."""
    return "after its one layer" if depth == 1 else f"from layer 1 to layer {depth}"


def _output_widgets(W, width: int):
    """An explorer's readout (HTML), plot (PNG image, ``width`` pixels) and caption (HTML),
    with the CSS classes the browser test and the notebook styles look for."""
    readout, image, caption = W.HTML(), W.Image(format="png", width=width), W.HTML()
    readout.add_class("normref-readout")
    image.add_class("normref-plot")
    caption.add_class("normref-caption")
    return readout, image, caption


def _bundle(explorer, **kwargs) -> dict:
    """The explorer's widget view (JupyterLab) and its static HTML (a page without a kernel: the
    chart with its caption as alt text, the readout, the controls in words; normref.static_widgets)."""
    from .static_widgets import mimebundle

    alt = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", explorer.caption.value)).split())
    return mimebundle(explorer.widget, alt=alt, title="Explorer", **kwargs)


FEATURE_LIMIT = 8.0  # NormExplorer's feature sliders run from -8 to 8



class NormExplorer:
    """Sliders for one token vector, gamma, beta and eps; a live bar chart and the numbers.

    The chart shows the input ``x`` (orange, hatched) and the output ``y`` (blue) feature by
    feature, each with its mean (a line) and mean +- one std (a shaded band). ``y`` is computed
    by :func:`normref.layer_norm` or :func:`normref.rms_norm` (float64) with gamma and beta
    broadcast to every feature.

    Controls (``description`` -> attribute):
        ``"x[0]"``, ``"x[1]"``, ... -> ``feature_sliders[i]`` (``FloatSlider``, -8..8, step 0.1:
        room to add 3 to every feature of the seed's (1, 2, 3) and more);
        ``"gamma"`` -> ``weight_slider`` (-2..3); ``"beta"`` -> ``bias_slider`` (-2..2; disabled
        for RMSNorm, which has no bias); ``"eps"`` -> ``eps_slider`` (``FloatLogSlider``,
        1e-8..10); ``"norm"`` -> ``norm_toggle`` (``ToggleButtons``, values ``"layer"`` /
        ``"rms"``, labels LayerNorm / RMSNorm; shown only when ``toggle=True``).

    Readout (``readout``, an ``HTML`` widget, CSS class ``normref-readout``), always five lines::

        norm = LayerNorm   gamma = 1.000   beta = 0.000   eps = 1.0e-05
        x = [1.000, 2.000, 3.000]
        mean(x) = 2.000   std(x) = 0.816   rms(x) = 2.160
        y = [-1.225, 0.000, 1.225]
        mean(y) = 0.000   std(y) = 1.000   rms(y) = 1.000

    (std is the biased one, divide by d; for RMSNorm ``beta`` reads ``beta = unused``.)
    :func:`parse_readout` turns it back into numbers.

    Args:
        x: the starting token, 1-D, 2 to 8 features (default the seed's ``(1, 2, 3)``).
        norm: ``"layer"`` or ``"rms"``.
        toggle: show the LayerNorm/RMSNorm switch.
        weight, bias: starting gamma and beta (scalars).
        eps: starting eps; default the norm's ``normref`` default.

    Attributes:
        widget: the ``ipywidgets.VBox`` to display (a notebook cell ending in the explorer
            shows it).
        values: the last computed numbers: ``x``, ``y`` (numpy), ``norm``, ``gamma``,
            ``beta``, ``eps`` and the ``mean_x, std_x, mean_y, std_y`` that were drawn.
        renders: how many times the chart was redrawn.

    Raises:
        ValueError: ``x`` is not 1-D with 2..8 entries, or ``norm`` is unknown.

    Source: the seed's LayerNorm and RMSNorm formulas and worked example (1, 2, 3).
    """

    def __init__(self, x=(1.0, 2.0, 3.0), *, norm: str = "layer", toggle: bool = False,
                 weight: float = 1.0, bias: float = 0.0, eps: float | None = None):
        import ipywidgets as W
        from matplotlib.figure import Figure

        from .functional import LAYER_NORM_EPS, RMS_NORM_EPS

        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 1 or not 2 <= x.shape[0] <= 8:
            raise ValueError(f"x must be one token with 2 to 8 features, got shape {list(x.shape)}")
        if np.abs(x).max() > FEATURE_LIMIT:
            raise ValueError(f"x must lie in [-{FEATURE_LIMIT:g}, {FEATURE_LIMIT:g}] (the sliders' range), "
                             f"got {x.tolist()}")
        if norm not in _NORM_NAMES:
            raise ValueError(f"norm must be 'layer' or 'rms', got {norm!r}")
        if eps is None:
            eps = LAYER_NORM_EPS if norm == "layer" else RMS_NORM_EPS
        style = {"description_width": "4em"}
        lay = W.Layout(width="340px")
        self.feature_sliders = [
            W.FloatSlider(value=float(v), min=-FEATURE_LIMIT, max=FEATURE_LIMIT, step=0.1, description=f"x[{i}]",
                          readout_format=".2f", continuous_update=False, style=style, layout=lay)
            for i, v in enumerate(x)
        ]
        self.weight_slider = W.FloatSlider(value=weight, min=-2.0, max=3.0, step=0.05,
                                           description="gamma", continuous_update=False,
                                           style=style, layout=lay)
        self.bias_slider = W.FloatSlider(value=bias, min=-2.0, max=2.0, step=0.05,
                                         description="beta", continuous_update=False,
                                         style=style, layout=lay)
        self.eps_slider = W.FloatLogSlider(value=eps, base=10, min=-8, max=1, step=0.1,
                                           description="eps", readout_format=".1e",
                                           continuous_update=False, style=style, layout=lay)
        self.norm_toggle = W.ToggleButtons(options=[("LayerNorm", "layer"), ("RMSNorm", "rms")],
                                           value=norm, description="norm", style=style)
        self.readout, self.image, self.caption = _output_widgets(W, width=720)

        # A fixed layout (no constrained layout): one draw per update instead of two.
        self._fig = Figure(figsize=(8.0, 4.0), dpi=90)
        self._ax = self._fig.add_subplot()
        self._fig.subplots_adjust(left=0.09, right=0.76, top=0.92, bottom=0.13)
        self.values: dict = {}
        self.renders = 0

        # Controls in two columns above the chart, so nothing is squeezed in a narrow page.
        features = W.VBox([W.HTML("<b>Token x (drag a feature)</b>"), *self.feature_sliders],
                          layout=W.Layout(min_width="350px"))
        params = W.VBox([W.HTML("<b>Norm parameters</b>"), self.weight_slider, self.bias_slider,
                         self.eps_slider], layout=W.Layout(min_width="350px"))
        top = [self.norm_toggle] if toggle else []
        self.widget = W.VBox(top + [W.HBox([features, params], layout=W.Layout(flex_flow="row wrap")),
                                    self.image, self.caption, self.readout])
        for s in (*self.feature_sliders, self.weight_slider, self.bias_slider, self.eps_slider,
                  self.norm_toggle):
            s.observe(self._update, names="value")
        self._update()

    # -- the callback -------------------------------------------------------------------

    def _update(self, change=None) -> None:
        import io

        x = np.array([s.value for s in self.feature_sliders], dtype=np.float64)
        norm = self.norm_toggle.value
        gamma, beta, eps = self.weight_slider.value, self.bias_slider.value, self.eps_slider.value
        self.bias_slider.disabled = norm == "rms"
        y = normalize_token(x, norm=norm, weight=gamma, bias=beta, eps=eps)
        name = _NORM_NAMES[norm]
        lim = max(5.5, 1.1 * float(np.abs(np.r_[x, y]).max()))
        drawn = draw_token_bars(self._ax, x, y, title=f"{name}: input x vs output y", ylim=lim)
        buf = io.BytesIO()
        self._fig.savefig(buf, format="png", dpi=PNG_DPI)
        self.image.value = buf.getvalue()
        self.renders += 1
        rms = lambda v: float(np.sqrt(np.mean(v ** 2)))  # noqa: E731
        self.values = {"x": x, "y": y, "norm": norm, "gamma": gamma, "beta": beta, "eps": eps,
                       **{k: drawn[k] for k in ("mean_x", "std_x", "mean_y", "std_y")}}
        b = "unused" if norm == "rms" else fmt_number(beta)
        lines = [
            f"norm = {name}   gamma = {fmt_number(gamma)}   beta = {b}   eps = {eps:.1e}",
            f"x = {fmt_vector(x)}",
            f"mean(x) = {fmt_number(x.mean())}   std(x) = {fmt_number(x.std())}   rms(x) = {fmt_number(rms(x))}",
            f"y = {fmt_vector(y)}",
            f"mean(y) = {fmt_number(y.mean())}   std(y) = {fmt_number(y.std())}   rms(y) = {fmt_number(rms(y))}",
        ]
        self.readout.value = "<pre>" + html.escape("\n".join(lines)) + "</pre>"
        alt = (f"Bar chart: the {len(x)} features of x = {fmt_vector(x)} (orange, hatched) and "
               f"{name} output y = {fmt_vector(y)} (blue); lines mark each mean "
               f"(x: {fmt_number(x.mean())}, y: {fmt_number(y.mean())}), shaded bands mean ± std.")
        self.caption.value = f'<div style="font-size:small;line-height:1.35">{html.escape(alt)}</div>'

    @property
    def axes(self):
        """The matplotlib ``Axes`` the bars are drawn on (its ``containers`` hold the bars)."""
        return self._ax

    @property
    def readout_text(self) -> str:
        """The readout's plain text (the five lines above)."""

        return html.unescape(re.sub(r"<[^>]+>", "", self.readout.value))

    def _repr_mimebundle_(self, **kwargs):
        return _bundle(self, **kwargs)


_PLACEMENT_NAMES = {"pre": "Pre-LN", "post": "Post-LN"}


class PlacementExplorer:
    """Switch the placement, depth and norm of a :class:`normref.TransformerStack`; see the
    residual stream and the gradients per layer at initialisation.

    Each change builds a fresh stack (seeded; Xavier-uniform linear weights, as
    :class:`normref.TransformerBlock` initialises them) for *both* placements
    and runs :func:`normref.experiments.probe_stack`: one forward and backward pass on a
    ``[8, 16, 32]`` input. The chosen placement is drawn in colour, the other in grey for
    comparison: left, the mean token norm of the residual stream after each layer; right, the
    gradient norm of each layer's second feed-forward matrix (log scale).

    Controls (``description`` -> attribute):
        ``"placement"`` -> ``placement_toggle`` (``ToggleButtons``, values ``"pre"``/``"post"``);
        ``"depth"`` -> ``depth_slider`` (``IntSlider``, 1..16); ``"norm"`` -> ``norm_toggle``
        (``ToggleButtons``, values ``"layer"``/``"rms"``).

    Readout (``readout``, ``HTML``, CSS class ``normref-readout``), four lines::

        placement = Pre-LN   depth = 8   norm = LayerNorm
        residual = [6.501, 7.544, ...]
        grad = [0.123, 0.096, ...]
        grad last/first = 0.465   grad last vs Post-LN = 0.450

    Args:
        placement: ``"pre"`` or ``"post"``.
        depth: 1..16.
        norm: ``"layer"`` or ``"rms"``.
        seed: the probe's seed.

    Attributes:
        widget: the ``ipywidgets.VBox`` to display.
        values: the last probe: ``{"pre": probe, "post": probe}`` plus the settings.
        renders: how many times the charts were redrawn.

    Raises:
        ValueError: unknown ``placement`` or ``norm``, or ``depth`` outside 1..16.

    Source: Xiong et al. 2020, Fig. 1 (the two placements) and Fig. 3 (gradients per layer).
    """

    def __init__(self, *, placement: str = "pre", depth: int = 8, norm: str = "layer", seed: int = 0):
        import ipywidgets as W
        from matplotlib.figure import Figure

        if placement not in _PLACEMENT_NAMES:
            raise ValueError(f"placement must be 'pre' or 'post', got {placement!r}")
        if norm not in _NORM_NAMES:
            raise ValueError(f"norm must be 'layer' or 'rms', got {norm!r}")
        if not 1 <= depth <= 16:
            raise ValueError(f"depth must be 1..16, got {depth}")
        self.seed = seed
        self.placement_toggle = W.ToggleButtons(options=[("Pre-LN", "pre"), ("Post-LN", "post")],
                                                value=placement, description="placement")
        self.depth_slider = W.IntSlider(value=depth, min=1, max=16, step=1, description="depth",
                                        continuous_update=False)
        self.norm_toggle = W.ToggleButtons(options=[("LayerNorm", "layer"), ("RMSNorm", "rms")],
                                           value=norm, description="norm")
        self.readout, self.image, self.caption = _output_widgets(W, width=860)
        self._fig = Figure(figsize=(10.0, 3.6), dpi=90)
        self._axes = self._fig.subplots(1, 2)
        self._fig.subplots_adjust(left=0.07, right=0.98, top=0.88, bottom=0.16, wspace=0.25)
        self.values: dict = {}
        self.renders = 0
        self.widget = W.VBox([W.HBox([self.placement_toggle, self.norm_toggle]), self.depth_slider,
                              self.image, self.caption, self.readout])
        for c in (self.placement_toggle, self.depth_slider, self.norm_toggle):
            c.observe(self._update, names="value")
        self._update()

    def _update(self, change=None) -> None:
        import io

        from .experiments import probe_stack
        from .plots import SERIES_STYLE

        placement, depth, norm = self.placement_toggle.value, self.depth_slider.value, self.norm_toggle.value
        other = "post" if placement == "pre" else "pre"
        probes = {p: probe_stack(p, depth=depth, norm=norm, seed=self.seed) for p in ("pre", "post")}
        layers = np.arange(1, depth + 1)
        panels = (("residual", "mean token norm ‖x‖₂ (unitless)", "Residual stream after each layer"),
                  ("grad", "‖∂loss/∂W2‖ (log scale)", "Gradient norm per layer at init"))
        for ax, (key, ylabel, title) in zip(self._axes, panels):
            ax.clear()
            st = SERIES_STYLE[placement]
            ax.plot(layers, probes[other][key], color="#999999", marker="x", linestyle=":",
                    label=f"{_PLACEMENT_NAMES[other]} (for comparison)")
            ax.plot(layers, probes[placement][key], color=st["color"], marker=st["marker"],
                    linestyle=st["linestyle"], linewidth=2, label=_PLACEMENT_NAMES[placement])
            if key == "grad":
                ax.set_yscale("log")
            ax.set_xlabel("layer l (1 = nearest the input)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{title}, {_NORM_NAMES[norm]}")
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
            ax.set_xticks(layers if depth <= 8 else layers[::2])
        buf = io.BytesIO()
        self._fig.savefig(buf, format="png", dpi=PNG_DPI)
        self.image.value = buf.getvalue()
        self.renders += 1
        mine, theirs = probes[placement], probes[other]
        first_last = float(mine["grad"][-1] / mine["grad"][0])
        vs_other = float(mine["grad"][-1] / theirs["grad"][-1])
        self.values = {"placement": placement, "depth": depth, "norm": norm, **probes,
                       "grad_last_over_first": first_last, "grad_last_vs_other": vs_other}
        lines = [
            f"placement = {_PLACEMENT_NAMES[placement]}   depth = {depth}   norm = {_NORM_NAMES[norm]}",
            f"residual = {fmt_vector(mine['residual'])}",
            f"grad = {fmt_vector(mine['grad'])}",
            f"grad last/first = {fmt_number(first_last)}   "
            f"grad last vs {_PLACEMENT_NAMES[other]} = {fmt_number(vs_other)}",
        ]
        self.readout.value = "<pre>" + html.escape("\n".join(lines)) + "</pre>"
        if depth == 1:
            told = (f"the residual stream's token norm is {float(mine['residual'][0]):.2f} after its one "
                    f"layer, and there is one layer's gradient")
        else:
            told = (f"the residual stream's token norm {trend(mine['residual'][0], mine['residual'][-1])} "
                    f"{_layer_span(depth)}; the last layer's gradient is {first_last:.2f} times the first layer's")
        alt = (f"Two line charts for {_indefinite(depth)}-layer {_PLACEMENT_NAMES[placement]} stack with "
               f"{_NORM_NAMES[norm]} (coloured) and {_PLACEMENT_NAMES[other]} (grey): {told}.")
        self.caption.value = f'<div style="font-size:small;line-height:1.35">{html.escape(alt)}</div>'

    @property
    def readout_text(self) -> str:
        """The readout's plain text (the four lines above)."""

        return html.unescape(re.sub(r"<[^>]+>", "", self.readout.value))

    def _repr_mimebundle_(self, **kwargs):
        return _bundle(self, **kwargs)


#: The learning rates :class:`LearningRateExplorer` offers (log-spaced, Adam).
LEARNING_RATES = (0.003, 0.01, 0.03, 0.1, 0.3)


class LearningRateExplorer:
    """Slide Adam's learning rate and see the tiny language model of lesson 04 train with Pre-LN
    beside another placement: the loss per step, and the hidden-state RMS per layer after training.

    Each new (placement, learning rate) trains :func:`normref.modern_experiments.train_tiny`
    (40 steps, seed ``seed``: about 0.4 s of one CPU core per run, measured) and keeps the result, so
    going back to a setting redraws at once. Runs handed in with ``runs`` are used as they are.

    Controls (``description`` -> attribute):
        ``"lr"`` -> ``lr_slider`` (``SelectionSlider`` over :data:`LEARNING_RATES`);
        ``"placement"`` -> ``placement_toggle`` (``ToggleButtons``, values ``"peri"``,
        ``"output"``, ``"post"``, ``"deep"``: drawn beside Pre-LN).

    Readout (``readout``, ``HTML``, CSS class ``normref-readout``), three lines::

        lr = 0.100   placement = Peri-LN   seed = 0
        final Pre-LN = 1.137   final Peri-LN = 0.832
        rms Pre-LN = 3329.949   rms Peri-LN = 7.356

    (``final``: the mean loss of the last 10 steps; ``rms``: the last layer's hidden-state RMS
    after training.)

    Args:
        lr: the starting learning rate, one of :data:`LEARNING_RATES`.
        placement: the starting placement drawn beside Pre-LN.
        seed: the runs' seed.
        runs: already trained runs to reuse, ``{(placement, lr): run}`` (seed ``seed``).

    Attributes:
        widget: the ``ipywidgets.VBox`` to display.
        values: the last drawn numbers: ``lr``, ``placement``, ``final`` and ``rms`` (``{placement:
            float}``).
        renders: how many times the charts were redrawn; trained: how many runs it trained.

    Raises:
        ValueError: ``lr`` not in :data:`LEARNING_RATES`, or an unknown ``placement``.

    Source: Kim et al. 2025 (Pre-LN vs Peri-LN at high learning rates); Wang et al. 2022
    (DeepNorm); Team OLMo 2024 (Output-LN).
    """

    def __init__(self, *, lr: float = 0.1, placement: str = "peri", seed: int = 0, runs: dict | None = None):
        import ipywidgets as W
        from matplotlib.figure import Figure

        from .placements import PLACEMENTS

        if lr not in LEARNING_RATES:
            raise ValueError(f"lr must be one of {LEARNING_RATES}, got {lr!r}")
        if placement not in ("peri", "output", "post", "deep"):
            raise ValueError(f"placement must be 'peri', 'output', 'post' or 'deep', got {placement!r}")
        self.seed = seed
        self._names = {k: v[0] for k, v in PLACEMENTS.items()}
        self._cache = dict(runs or {})
        self.lr_slider = W.SelectionSlider(options=[(f"{v:g}", v) for v in LEARNING_RATES], value=lr,
                                           description="lr", continuous_update=False)
        self.placement_toggle = W.ToggleButtons(
            options=[(self._names[k], k) for k in ("peri", "output", "post", "deep")], value=placement,
            description="placement")
        self.readout, self.image, self.caption = _output_widgets(W, width=860)
        self._fig = Figure(figsize=(10.0, 3.7), dpi=90)
        self._axes = self._fig.subplots(1, 2)
        self._fig.subplots_adjust(left=0.07, right=0.98, top=0.88, bottom=0.15, wspace=0.25)
        self.values: dict = {}
        self.renders = 0
        self.trained = 0
        self.widget = W.VBox([self.placement_toggle, self.lr_slider, self.image, self.caption, self.readout])
        for c in (self.lr_slider, self.placement_toggle):
            c.observe(self._update, names="value")
        self._update()

    def _run(self, placement: str, lr: float) -> dict:
        from .modern_experiments import train_tiny

        key = (placement, lr)
        if key not in self._cache:
            self._cache[key] = train_tiny(placement, lr=lr, seed=self.seed, record_logits=False)
            self.trained += 1
        return self._cache[key]

    def _update(self, change=None) -> None:
        import io

        from .modern_experiments import final_loss
        from .modern_plots import PLACEMENT_STYLE

        lr, other = self.lr_slider.value, self.placement_toggle.value
        runs = {p: self._run(p, lr) for p in ("pre", other)}
        left, right = self._axes
        left.clear()
        right.clear()
        for p, r in runs.items():
            st = PLACEMENT_STYLE[p]
            loss = np.asarray(r["loss"])
            left.plot(np.arange(1, len(loss) + 1), loss, color=st["color"], linestyle=st["linestyle"],
                      marker=st["marker"], markevery=max(1, len(loss) // 6), label=self._names[p])
            layers = np.arange(1, len(r["rms_final"]) + 1)
            right.plot(layers, r["rms_final"], color=st["color"], linestyle=st["linestyle"], marker=st["marker"],
                       label=f"{self._names[p]}, trained")
            right.plot(layers, r["rms_init"], color=st["color"], linestyle=":", linewidth=1,
                       label=f"{self._names[p]}, at init")
        left.axhline(np.log(2), color="black", linewidth=0.8, linestyle="-.", label="ln 2")
        left.set_ylim(0.5, max(3.2, min(8.0, max(float(np.nanmax(r["loss"])) for r in runs.values()))))
        left.set_xlabel("training step")
        left.set_ylabel("loss (nats per token)")
        left.set_title(f"Training loss, Adam lr {lr:g}, seed {self.seed}")
        right.set_yscale("log")
        right.set_xlabel("layer l (1 = nearest the input)")
        right.set_ylabel("hidden-state RMS (log scale)")
        right.set_title("Hidden states after 40 steps")
        for ax in (left, right):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        buf = io.BytesIO()
        self._fig.savefig(buf, format="png", dpi=PNG_DPI)
        self.image.value = buf.getvalue()
        self.renders += 1
        final = {p: final_loss(r) for p, r in runs.items()}
        rms = {p: float(r["rms_final"][-1]) for p, r in runs.items()}
        self.values = {"lr": lr, "placement": other, "final": final, "rms": rms}
        a, b = self._names["pre"], self._names[other]
        lines = [f"lr = {fmt_number(lr)}   placement = {b}   seed = {self.seed}",
                 f"final {a} = {fmt_number(final['pre'])}   final {b} = {fmt_number(final[other])}",
                 f"rms {a} = {fmt_number(rms['pre'])}   rms {b} = {fmt_number(rms[other])}"]
        self.readout.value = "<pre>" + html.escape("\n".join(lines)) + "</pre>"
        better = a if final["pre"] < final[other] else b
        alt = (f"Two line charts at learning rate {lr:g}: the training loss of {a} and {b} per step (final "
               f"{final['pre']:.2f} and {final[other]:.2f} nats, {better} lower), and the hidden-state RMS per "
               f"layer after training (last layer {rms['pre']:.3g} and {rms[other]:.3g}), dotted at init.")
        self.caption.value = f'<div style="font-size:small;line-height:1.35">{html.escape(alt)}</div>'

    @property
    def readout_text(self) -> str:
        """The readout's plain text (the three lines above)."""

        return html.unescape(re.sub(r"<[^>]+>", "", self.readout.value))

    def _repr_mimebundle_(self, **kwargs):
        return _bundle(self, **kwargs)
