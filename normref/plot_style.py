"""The course's figure style: the Okabe-Ito palette, one fixed style per series, the
:class:`Plot` every ``plot_*`` function returns (the figure, its alt text, its takeaway and the
numbers plotted) and the helpers that make a figure (:func:`trend`: a quantity's change in words).
:mod:`normref.plots` and :mod:`normref.modern_plots` draw with these; ``normref.plots`` re-exports
them.

matplotlib is imported inside the functions, so ``import normref`` stays cheap.
"""
from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field

__all__ = ["OKABE_ITO", "SERIES_STYLE", "Plot", "trend"]

#: Okabe and Ito (2008), "Color Universal Design": safe for protan, deutan and tritan viewers.
OKABE_ITO = {
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
    "black": "#000000",
}

#: One fixed style per series the lesson compares, so a reader learns it once.
SERIES_STYLE = {
    "input": dict(color=OKABE_ITO["orange"], hatch="//", marker="s", linestyle="--"),
    "output": dict(color=OKABE_ITO["blue"], hatch="", marker="o", linestyle="-"),
    "layer": dict(color=OKABE_ITO["blue"], marker="o", linestyle="-"),
    "rms": dict(color=OKABE_ITO["vermillion"], marker="s", linestyle="--"),
    "pre": dict(color=OKABE_ITO["blue"], marker="o", linestyle="-"),
    "post": dict(color=OKABE_ITO["vermillion"], marker="s", linestyle="--"),
}

_DPI = 100


@dataclass
class Plot:
    """A finished figure with the words that go with it.

    Attributes:
        fig: the ``matplotlib.figure.Figure``.
        alt: what is plotted, in words (the ``<img alt>`` and the caption's first sentence).
        takeaway: the one-line lesson of the figure, said once, in the caption.
        data: the numbers that were plotted, by name (numpy arrays or floats).
    """

    fig: object
    alt: str
    takeaway: str
    data: dict = field(default_factory=dict)

    def png(self) -> bytes:
        """The figure as PNG bytes (Agg, 100 dpi)."""
        buf = io.BytesIO()
        self.fig.savefig(buf, format="png", dpi=_DPI)
        return buf.getvalue()

    def save(self, path) -> None:
        """Write the figure to ``path`` as PNG."""
        with open(path, "wb") as f:
            f.write(self.png())

    def to_html(self) -> str:
        """``<figure>`` with the PNG inlined, ``alt`` on the image and a ``<figcaption>``."""
        b64 = base64.b64encode(self.png()).decode("ascii")
        # the alt text says what is plotted and what it shows (a reader who cannot see the image
        # gets the takeaway from it); the caption says both to everyone
        alt = html.escape(f"{self.alt} Takeaway: {self.takeaway}", quote=True)
        return (
            f'<figure style="margin:0">'
            f'<img src="data:image/png;base64,{b64}" alt="{alt}" style="max-width:100%"/>'
            f"<figcaption><b>Figure.</b> {html.escape(self.alt)} "
            f"<b>Takeaway:</b> {html.escape(self.takeaway)}</figcaption></figure>"
        )

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": self.to_html(), "text/plain": f"{self.alt}\nTakeaway: {self.takeaway}"}


def trend(first: float, last: float, *, rel_tol: float = 0.005) -> str:
    """Words for how a quantity went from ``first`` to ``last``, as a caption states it.

    ``"stays at 5.66"`` when the two agree within ``rel_tol`` (relative; Post-LN's residual
    norm is sqrt(D) after every layer), else ``"grows from 5.66 to 11.02"`` or ``"shrinks from
    ... to ..."``; two decimals.
    """
    first, last = float(first), float(last)
    if abs(last - first) <= rel_tol * max(abs(first), abs(last)):
        return f"stays at {last:.2f}"
    return f"{'grows' if last > first else 'shrinks'} from {first:.2f} to {last:.2f}"


def _figure(w: float, h: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), dpi=_DPI, layout="constrained")


def _takeaway(fig, text: str) -> None:
    """Nothing is drawn: a figure's takeaway is said once, in its ``<figcaption>`` (where the
    browser wraps it between words); drawn under the axes as well, the student read it twice."""
    return None
