"""The lesson's measurements: the numbers the notebooks show and the plots draw.

- :func:`invariance_table`: Ba et al. 2016's Table 1 (what re-scaling and re-centering leave
  unchanged), measured for LayerNorm and RMSNorm rather than typed in.
- :func:`float16_overflow_demo`: why statistics are computed in float32 (the seed's
  Engineering bridge): ``x**2`` overflows float16 and the output collapses to zero.
- :func:`time_norms`: what LayerNorm and RMSNorm cost on the machine running the notebook.
- :func:`probe_stack`, :func:`placement_profiles`, :func:`last_layer_grad_vs_depth`,
  :func:`train_placements`: Pre-LN vs Post-LN at initialisation (the residual stream's norm
  and each layer's gradient) and in a tiny training run (Xiong et al. 2020).

Everything is seeded and CPU-sized (seconds).
"""
from __future__ import annotations

import html
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from .functional import RMS_NORM_EPS, layer_norm, rms_norm

__all__ = [
    "InvarianceTable",
    "invariance_table",
    "float16_overflow_demo",
    "time_norms",
    "RMSNORM_PAPER_CLAIM",
    "XIONG_PARAM",
    "one_thread",
    "probe_stack",
    "placement_profiles",
    "last_layer_grad_vs_depth",
    "train_placements",
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
    the normalized result back"); ``normref.faults.FAULTS["low_precision_stats"]``.
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


# --------------------------------------------------------------------------- placement


@contextmanager
def one_thread():
    """Run torch on one thread inside the block (restored after).

    The lesson's tensors are tiny: with several threads, each small op pays for waking the
    others, and on a shared 2-core machine that made a training run 50 times slower.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


#: Xiong et al. 2020 plot the gradient of each layer's second feed-forward matrix, W^{2,l};
#: in the MiniMind-shaped block that is ``mlp.down_proj.weight``.
XIONG_PARAM = "mlp.down_proj.weight"


def probe_stack(placement: str, *, depth: int = 8, dim: int = 32, n_heads: int = 4,
                norm: str = "layer", seed: int = 0, batch: int = 8, seq: int = 16,
                vocab: int = 32) -> dict:
    """One forward and backward pass of a freshly initialised :class:`normref.TransformerStack`.

    The stack (its linear layers Xavier-initialised as in :class:`normref.TransformerBlock`,
    seeded) reads a ``[batch, seq, dim]`` standard-normal input; a linear head (PyTorch's
    default init) maps its output to ``vocab`` logits and the loss is the cross-entropy
    against random targets, as at the first step of training.

    Args:
        placement: ``"pre"`` or ``"post"``.
        depth, dim, n_heads, norm: the stack (``norm`` is ``"layer"`` or ``"rms"``).
        seed: seeds the weights, the input and the targets.
        batch, seq, vocab: the probe's size.

    Returns:
        ``{"residual": [depth] mean L2 norm of a token of the residual stream after each
        block, "grad": [depth] gradient norm of each block's W2 (``XIONG_PARAM``), "loss":
        float}``; numpy float64 arrays, input side first.

    Raises:
        ValueError: what :class:`normref.TransformerStack` raises for a bad configuration.

    Source: Xiong et al. 2020, section 3 and Fig. 3 (gradients at initialisation).
    """
    import torch
    import torch.nn.functional as F

    from .blocks import TransformerStack, layer_grad_norms

    with one_thread():
        torch.manual_seed(seed)
        stack = TransformerStack(depth, dim, n_heads, norm=norm, placement=placement)
        head = torch.nn.Linear(dim, vocab, bias=False)
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(batch, seq, dim, generator=g)  # [B, T, D]
        targets = torch.randint(0, vocab, (batch, seq), generator=g)  # [B, T]
        y, hidden = stack(x, return_hidden=True)  # hidden: depth + 1 tensors [B, T, D]
        loss = F.cross_entropy(head(y).flatten(0, 1), targets.flatten())
        loss.backward()
    residual = [float(h.detach().norm(dim=-1).mean()) for h in hidden[1:]]
    return {"residual": np.array(residual), "grad": np.array(layer_grad_norms(stack, XIONG_PARAM)),
            "loss": loss.item()}


def placement_profiles(*, depth: int = 8, norm: str = "layer", seeds=(0, 1, 2), **kwargs) -> dict:
    """Residual-stream size and W2 gradient norm per layer, Pre-LN and Post-LN, mean over seeds.

    Args:
        depth, norm: the stacks compared.
        seeds: one :func:`probe_stack` per seed and placement; the arrays are averaged.
        **kwargs: passed to :func:`probe_stack` (``dim``, ``n_heads``, ``batch``, ``seq``, ``vocab``).

    Returns:
        ``{"residual": {"pre": [depth], "post": [depth]}, "grad": {"pre": ..., "post": ...},
        "depth", "norm", "seeds"}`` (float64 arrays, input side first).

    Source: Xiong et al. 2020, Fig. 3 and Lemma 2 (Pre-LN's hidden state grows with depth).
    """
    out = {"residual": {}, "grad": {}, "depth": depth, "norm": norm, "seeds": tuple(seeds)}
    for placement in ("pre", "post"):
        runs = [probe_stack(placement, depth=depth, norm=norm, seed=s, **kwargs) for s in seeds]
        out["residual"][placement] = np.mean([r["residual"] for r in runs], axis=0)
        out["grad"][placement] = np.mean([r["grad"] for r in runs], axis=0)
    return out


def last_layer_grad_vs_depth(depths=(1, 2, 4, 8, 16), *, norm: str = "layer", seeds=(0, 1),
                             **kwargs) -> dict:
    """The last block's W2 gradient norm at initialisation as the stack gets deeper.

    Xiong et al.'s Theorem 1: for Post-LN it does not depend on the depth L; for Pre-LN it
    shrinks like ``1 / sqrt(L)``. So the deeper the stack, the larger Post-LN's output-side
    gradients are compared with Pre-LN's, and the smaller a learning rate Post-LN can take
    at the first steps (hence warmup).

    Args:
        depths: the depths L to measure.
        norm, seeds, **kwargs: as :func:`placement_profiles`.

    Returns:
        ``{"depths": [n] ints, "pre": [n], "post": [n]}`` (mean over seeds, float64).

    Source: Xiong et al. 2020, Theorem 1.
    """
    out = {"depths": list(depths)}
    for placement in ("pre", "post"):
        out[placement] = np.array([
            np.mean([probe_stack(placement, depth=L, norm=norm, seed=s, **kwargs)["grad"][-1]
                     for s in seeds]) for L in depths])
    return out


def _bigram_data(vocab: int, seq: int, n: int, seed: int):
    """``n`` sequences of ``seq + 1`` tokens from a fixed random Markov chain in which every
    token has two equally likely successors: the best possible loss is ln 2 = 0.693 nats."""
    import torch

    g = torch.Generator().manual_seed(seed)
    succ = torch.stack([torch.randperm(vocab, generator=g)[:2] for _ in range(vocab)])  # [vocab, 2]
    coin = torch.randint(0, 2, (n, seq), generator=g)  # which successor, per step
    x = torch.zeros(n, seq + 1, dtype=torch.long)
    x[:, 0] = torch.randint(0, vocab, (n,), generator=g)
    for t in range(seq):
        x[:, t + 1] = succ[x[:, t], coin[:, t]]
    return x  # [n, seq + 1]


def train_placements(*, steps: int = 60, warmup: int = 20, lr: float = 1.5e-2, depth: int = 6,
                     dim: int = 32, n_heads: int = 4, norm: str = "layer", batch: int = 16,
                     seq: int = 16, vocab: int = 16, seed: int = 0, runs=None) -> dict:
    """Train a tiny language model with each placement, with and without learning-rate warmup.

    Model: token and position embeddings, a :class:`normref.TransformerStack`, a linear head.
    Data: sequences from a fixed Markov chain where each token has two equally likely
    successors (best possible loss ln 2 = 0.693). Optimiser: Adam (betas 0.9, 0.98, as in
    Vaswani et al.) at ``lr``; with warmup the rate rises linearly from ``lr / warmup`` to
    ``lr`` over the first ``warmup`` steps, then stays. Same seed, data and batches for every
    run. On one CPU thread the four runs of the defaults take about 6 s of CPU (depth 2: 2.5 s,
    depth 10: 10 s; measured on a 2-core machine under load 7-9).

    Measured on seeds 0-2 (``tests/test_experiments.py`` checks seeds 0 and 1): with the
    defaults (depth 6) Post-LN without warmup stalls at 2.40 nats, the loss of predicting the
    next token from the tokens' frequencies alone (``"unigram"``), while Pre-LN reaches
    0.73-0.76 and Post-LN with warmup 0.91-1.06; at depth 2 all four reach 0.73-0.77; at depth
    10 and 12 Post-LN stalls at 2.40 with the 20 warmup steps too (and with 60 of 100 steps).

    Args:
        steps, warmup, lr: the schedule.
        depth, dim, n_heads, norm: the stack.
        batch, seq, vocab: the data.
        seed: seeds weights, data and batch order.
        runs: which ``(placement, warmup: bool)`` pairs to train; default all four.

    Returns:
        ``{(placement, warmup): [steps] training losses (float64), "optimal": ln 2 (the best
        possible loss), "unigram": the entropy of the next token's frequencies (2.40 nats: the
        loss of a model that ignores the previous token), "uniform": ln(vocab) (2.77: a
        uniform guess), "steps", "warmup", "lr", "depth"}``.

    Source: Xiong et al. 2020, section 3.1 and Fig. 2 (Post-LN needs warmup; Pre-LN trains
    without it).
    """
    import torch

    data = _bigram_data(vocab, seq, 2048, seed=123)
    runs = runs or [("pre", False), ("post", False), ("pre", True), ("post", True)]
    freq = torch.bincount(data[:, 1:].flatten(), minlength=vocab).double() / data[:, 1:].numel()
    freq = freq[freq > 0]
    out: dict = {"optimal": float(np.log(2.0)), "unigram": float(-(freq * freq.log()).sum()),
                 "uniform": float(np.log(vocab)), "steps": steps, "warmup": warmup, "lr": lr,
                 "depth": depth}
    with one_thread():
        for placement, warm in runs:
            torch.manual_seed(seed)
            model = _placement_lm(placement, depth=depth, dim=dim, n_heads=n_heads, norm=norm, seq=seq,
                                  vocab=vocab)
            out[(placement, warm)] = _train_run(model, data, steps=steps, warmup=warmup if warm else None,
                                                lr=lr, batch=batch, seed=seed)
    return out


def _placement_lm(placement: str, *, depth: int, dim: int, n_heads: int, norm: str, seq: int, vocab: int):
    """The tiny language model of :func:`train_placements`: embeddings, a stack, a linear head."""
    import torch
    from torch import nn

    from .blocks import TransformerStack

    class TinyLM(nn.Module):
        def __init__(self, placement):
            super().__init__()
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Embedding(seq, dim)
            self.stack = TransformerStack(depth, dim, n_heads, norm=norm, placement=placement)
            self.head = nn.Linear(dim, vocab, bias=False)

        def forward(self, idx):  # idx: [B, T]
            h = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))  # [B, T, D]
            return self.head(self.stack(h))  # [B, T, vocab]

    return TinyLM(placement)


def _train_run(model, data, *, steps: int, warmup: int | None, lr: float, batch: int, seed: int) -> np.ndarray:
    """``[steps]`` training losses of ``model`` under Adam at ``lr``, warmed up linearly over
    ``warmup`` steps (None: none), on batches of ``data`` drawn in ``seed``'s order."""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), foreach=True)
    ramp = (lambda s: min(1.0, (s + 1) / warmup)) if warmup is not None else (lambda s: 1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, ramp)
    order = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        idx = data[torch.randint(0, len(data), (batch,), generator=order)]  # [B, T + 1]
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return np.array(losses)
