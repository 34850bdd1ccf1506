"""Why not BatchNorm for tokens? Lesson 01's measurements, BatchNorm beside LayerNorm on ``[B, T, D]``.

BatchNorm (Ioffe and Szegedy 2015) computes each feature's mean and variance across the batch
(for a sequence model: across every token of every sequence, ``B*T`` values per feature);
LayerNorm (Ba et al. 2016) computes each token's across its own features. So a token's BatchNorm
output depends on the *other* tokens in the batch, and BatchNorm behaves differently in training
(the batch's statistics) and in evaluation (running averages kept during training).
:func:`batch_vs_layer` measures what that means, with ``torch.nn.BatchNorm1d`` (the library's
layer, on ``x.transpose(1, 2)``: ``[B, D, T]``, one channel per feature) and
``torch.nn.LayerNorm``; :func:`plot_batch_vs_layer` draws it.

The anchors: d2l.ai, "Batch Normalization" (why the batch's statistics, the train/eval modes) and
"Layer Normalization" in its transformer chapter; CS231n's normalization notes; Karpathy's
makemore part 3 ("BatchNorm couples the examples in the batch").

Everything is seeded, float64 and CPU-sized (milliseconds).
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field

__all__ = ["BatchVsLayer", "batch_vs_layer", "plot_batch_vs_layer"]

#: What each row of :func:`batch_vs_layer` does to the batch, in the lesson's words.
SCENARIOS = (
    ("another sequence joins the batch", "the same sequence, graded alone and then beside a second one"),
    ("a padding token is added", "the sequence gets one more token of zeros at its end (padding)"),
    ("train mode vs eval mode", "the same batch, normalised with its own statistics and then with the "
     "running averages kept over 20 training batches"),
    ("a batch of one token", "B = 1 and T = 1: one value per feature to take statistics over"),
)


@dataclass
class BatchVsLayer:
    """How much one token's normalised output moves, BatchNorm against LayerNorm.

    Attributes:
        change: ``{(scenario, "BatchNorm" | "LayerNorm"): max |output after - output before|}``
            over the first sequence's real tokens (float64; ``nan`` where the layer refused).
        refused: ``{(scenario, norm): the error it raised}``.
        tol: the change below which an output counts as unchanged.
    """

    change: dict = field(default_factory=dict)
    refused: dict = field(default_factory=dict)
    tol: float = 1e-12

    def moved(self, scenario: str, norm: str) -> bool:
        """Whether that norm's output moved (or it refused) in that scenario."""
        return (scenario, norm) in self.refused or self.change[(scenario, norm)] > self.tol

    def _cell(self, scenario: str, norm: str) -> str:
        if (scenario, norm) in self.refused:
            return "refuses: " + html.escape(self.refused[(scenario, norm)])
        v = self.change[(scenario, norm)]
        return "unchanged (0)" if v <= self.tol else f"moves by {v:.3f}"

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><th style='text-align:left'>{html.escape(s)}</th><td>{self._cell(s, 'BatchNorm')}</td>"
                       f"<td>{self._cell(s, 'LayerNorm')}</td></tr>" for s, _ in SCENARIOS)
        return ("<table><caption>Largest change of one sequence's normalised tokens (float64)</caption>"
                "<tr><th>what changes</th><th>BatchNorm</th><th>LayerNorm</th></tr>" + rows + "</table>")

    def __repr__(self) -> str:
        return "\n".join(f"{s:36s} BatchNorm: {self._cell(s, 'BatchNorm'):28s} LayerNorm: {self._cell(s, 'LayerNorm')}"
                         for s, _ in SCENARIOS)


def _norms(d: int):
    import torch

    bn = torch.nn.BatchNorm1d(d, dtype=torch.float64)  # weight 1, bias 0, eps 1e-5, momentum 0.1
    ln = torch.nn.LayerNorm(d, dtype=torch.float64)

    def batch(x, train=True):  # x: [B, T, D] -> BatchNorm1d over [B, D, T]
        bn.train(train)
        return bn(x.transpose(1, 2)).transpose(1, 2)  # [B, T, D]

    return bn, batch, ln


def batch_vs_layer(*, seed: int = 0, d: int = 8, t: int = 4, tol: float = 1e-12) -> BatchVsLayer:
    """Measure how one sequence's normalised tokens move under BatchNorm and LayerNorm when the
    batch around it changes (:data:`SCENARIOS`).

    Args:
        seed: torch seed for the sequences (``[1, t, d]`` each, mean 1, std 2, float64).
        d: features per token.
        t: tokens in the first sequence.
        tol: a change at most this large counts as unchanged.

    Returns:
        :class:`BatchVsLayer`; display it in a notebook for the table.

    Source: Ioffe and Szegedy 2015, "Batch Normalization", Algorithm 1 and section 3.1 (the
    running averages for inference); Ba, Kiros and Hinton 2016, section 3.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    a = 1.0 + 2.0 * torch.randn(1, t, d, generator=g, dtype=torch.float64)  # [1, T, D]
    b = -1.0 + 0.5 * torch.randn(1, t, d, generator=g, dtype=torch.float64)
    bn, batch, ln = _norms(d)
    out = BatchVsLayer(tol=tol)

    def record(scenario, norm, before, after):
        out.change[(scenario, norm)] = float((after - before).abs().max())

    with torch.no_grad():
        s = SCENARIOS[0][0]
        record(s, "BatchNorm", batch(a)[0], batch(torch.cat([a, b]))[0])
        record(s, "LayerNorm", ln(a)[0], ln(torch.cat([a, b]))[0])
        s = SCENARIOS[1][0]
        padded = torch.cat([a, torch.zeros(1, 1, d, dtype=torch.float64)], dim=1)  # [1, T+1, D]
        record(s, "BatchNorm", batch(a)[0], batch(padded)[0, :t])
        record(s, "LayerNorm", ln(a)[0], ln(padded)[0, :t])
        s = SCENARIOS[2][0]
        bn.reset_running_stats()
        for _ in range(20):  # training batches like the first sequence's
            batch(1.0 + 2.0 * torch.randn(2, t, d, generator=g, dtype=torch.float64), train=True)
        record(s, "BatchNorm", batch(a, train=True)[0], batch(a, train=False)[0])
        record(s, "LayerNorm", ln(a)[0], ln(a)[0])  # LayerNorm has no modes: the same computation
        s = SCENARIOS[3][0]
        one = a[:, :1]  # [1, 1, D]
        try:
            batch(one, train=True)
        except ValueError as e:
            out.refused[(s, "BatchNorm")] = str(e).split(", got")[0].strip()
            out.change[(s, "BatchNorm")] = float("nan")
        record(s, "LayerNorm", ln(one)[0], ln(a)[0, :1])  # alone or in its sequence: the same
    return out


def plot_batch_vs_layer(table: BatchVsLayer | None = None):
    """One bar pair per scenario: how far one sequence's tokens moved under BatchNorm and LayerNorm
    (a refused BatchNorm drawn as a hatched bar at the top, labelled).

    Returns:
        :class:`normref.plot_style.Plot`."""
    from .plot_style import OKABE_ITO, Plot, _figure

    table = table or batch_vs_layer()
    names = [s for s, _ in SCENARIOS]
    bn = [table.change[(s, "BatchNorm")] for s in names]
    ln = [table.change[(s, "LayerNorm")] for s in names]
    top = max(v for v in bn if v == v) * 1.25
    fig = _figure(7.2, 3.2)
    ax = fig.add_subplot(1, 1, 1)
    ys = range(len(names))
    for i, v in enumerate(bn):
        refused = v != v
        ax.barh(i + 0.2, top if refused else v, height=0.38, color=OKABE_ITO["vermillion"],
                hatch="//" if refused else "", label="BatchNorm" if i == 0 else None)
        ax.text(top * 0.02 if refused else v, i + 0.2, "  refuses (one value per feature)" if refused else f" {v:.2f}",
                va="center", fontsize=8, color="black",
                bbox=dict(facecolor="white", edgecolor="none", pad=1) if refused else None)
    ax.barh([i - 0.2 for i in ys], ln, height=0.38, color=OKABE_ITO["blue"], label="LayerNorm")
    for i, v in enumerate(ln):
        ax.text(v, i - 0.2, f" {v:.2f}", va="center", fontsize=8)
    ax.set_yticks(list(ys), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.15)
    ax.set_xlabel("largest change of one sequence's normalised tokens")
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    moved = sum(table.moved(s, "BatchNorm") for s in names)
    still = sum(not table.moved(s, "LayerNorm") for s in names)
    alt = (f"Horizontal bars, one pair per change to the batch around one sequence: BatchNorm's output moves "
           f"(or it refuses) in {moved} of {len(names)}, LayerNorm's in {len(names) - still}.")
    takeaway = ("BatchNorm's output for a token depends on the rest of the batch and on the mode; LayerNorm's "
                "depends on that token alone, which is why transformers normalise across features.")
    return Plot(fig, alt, takeaway, {"BatchNorm": bn, "LayerNorm": ln})
