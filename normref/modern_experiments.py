"""Lesson 04's measurements: today's placements (Peri-LN, Output-LN, DeepNorm), QK-norm and DyT on
a tiny model, on a laptop CPU, several seeds each.

- :func:`init_profiles`: hidden-state RMS and gradient norm per layer at initialisation, per
  placement (a stack fed random vectors, one cross-entropy backward).
- :func:`train_tiny` / :func:`train_runs`: a tiny language model trained a few dozen Adam steps,
  recording the loss, the largest attention logit and the hidden-state RMS per layer.
- :func:`lr_contrast`: the final losses of two placements at one learning rate over seeds, and
  whether one beats the other on every seed.
- :func:`ln_tanh_fit`: LayerNorm's input-output map in a trained model against ``lam * tanh(alpha x)``
  and against a straight line (Zhu et al. 2025's motivation for DyT, reproduced small).
- :func:`lesson_runs`: every run the lesson draws, on :data:`SEEDS`, read from the file shipped
  with the package (``normref/data/modern_runs.json``, written by ``tools/modern_runs.py``), or
  trained again with ``recompute=True`` (about 20 s of one core).

Everything is seeded, runs on one CPU thread (:func:`normref.experiments.one_thread`) and uses the
data of lesson 03: a Markov chain in which every token has two equally likely successors (best
possible loss ln 2 = 0.693 nats).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .experiments import XIONG_PARAM, _bigram_data, one_thread

__all__ = ["PLACEMENT_ORDER", "TINY", "LN_FIT_ALPHAS", "LOW_LR", "HIGH_LR", "LOW_RUNS", "HIGH_RUNS", "QK_RUNS",
           "DYT_RUNS", "SEEDS", "GROUPS", "RUNS_FILE", "init_profiles", "train_tiny", "train_runs", "lesson_runs",
           "write_lesson_runs", "loss_levels", "stalled", "spike_words",
           "final_loss", "lr_contrast", "contrast_words", "ln_tanh_fit", "layer_norm_maps", "tanh_gain", "summary_row"]

#: The placements in the order the lesson draws them.
PLACEMENT_ORDER = ("pre", "peri", "output", "post", "deep")

#: The tiny language model of every run: 6 blocks of width 32 (4 heads), 16 tokens, batches of 16.
TINY = {"depth": 6, "dim": 32, "n_heads": 4, "seq": 16, "vocab": 16, "batch": 16}

#: The alphas :func:`ln_tanh_fit` tries (log-spaced; ``tanh(alpha x) / alpha`` tends to ``x`` as
#: alpha goes to 0, so the grid's low end makes the tanh fit at least as good as the line's).
LN_FIT_ALPHAS = np.geomspace(1e-4, 10.0, 161)

#: The lesson's two learning rates: one where every placement but Post-LN trains, one where
#: Pre-LN falls behind Peri-LN (measured: tests/test_modern.py, seeds 0-2).
LOW_LR, HIGH_LR = 0.01, 0.1
#: The lesson's runs, ``{label: train_tiny keywords}``: every placement at the low learning rate,
#: the three un-normalised-stream placements at the high one, QK-norm, and DyT beside LayerNorm.
LOW_RUNS = {p: {"placement": p, "record_logits": False} for p in PLACEMENT_ORDER}
HIGH_RUNS = {p: {"placement": p} for p in ("pre", "peri", "output")}
QK_RUNS = {"pre + QK-norm": {"placement": "pre", "qk_norm": "rms"},
           "output + QK-norm": {"placement": "output", "qk_norm": "rms"}}
DYT_RUNS = {"LayerNorm": {"placement": "pre", "norm": "layer", "record_norm_io": True, "record_logits": False},
            "DyT": {"placement": "pre", "norm": "dyt", "record_logits": False}}

#: The seeds of every claim lesson 04 makes (it draws them all; tests/test_modern.py asserts on them).
SEEDS = (0, 1, 2, 3, 4)
#: The lesson's groups of runs: ``{group: (configurations, learning rate)}``.
GROUPS = {"low": (LOW_RUNS, LOW_LR), "high": (HIGH_RUNS, HIGH_LR), "qk": (QK_RUNS, HIGH_LR), "dyt": (DYT_RUNS, LOW_LR)}
#: The lesson's runs as trained by :func:`lesson_runs` (``recompute=True``), shipped with the package
#: so that the lesson's Run All takes seconds; ``tools/modern_runs.py`` writes it.
RUNS_FILE = Path(__file__).resolve().parent / "data" / "modern_runs.json"
_STEPS = 40
_RUN_KEYS = ("loss", "max_logit", "rms_init", "rms_final")

_DATA: dict = {}


def _data(vocab: int, seq: int):
    key = (vocab, seq)
    if key not in _DATA:
        _DATA[key] = _bigram_data(vocab, seq, 2048, seed=123)  # [2048, seq + 1]
    return _DATA[key]


def _rms_per_layer(hidden) -> np.ndarray:
    """Mean over tokens of each layer's hidden-state RMS, ``sqrt(mean over D of h^2)``: [depth]."""
    return np.array([float(h.detach().double().pow(2).mean(-1).sqrt().mean()) for h in hidden[1:]])


def init_profiles(*, placements=PLACEMENT_ORDER, depth: int = 8, dim: int = 32, n_heads: int = 4,
                  norm: str = "rms", seeds=(0, 1, 2), alpha: float | None = None, batch: int = 8,
                  seq: int = 16, vocab: int = 32) -> dict:
    """Hidden-state RMS and W2 gradient norm per layer of a freshly initialised stack, per placement.

    Each stack (:class:`normref.TransformerStack`, seeded) reads a ``[batch, seq, dim]``
    standard-normal input (RMS 1); a linear head maps its output to ``vocab`` logits, and one
    cross-entropy backward against random targets gives each block's gradient (Xiong et al.'s
    W2, ``mlp.down_proj.weight``), as at the first training step.

    Args:
        placements: keys of :data:`normref.placements.PLACEMENTS`.
        depth, dim, n_heads, norm: the stack.
        seeds: one stack per seed and placement.
        alpha: DeepNorm's residual scale (None: DeepNet's ``(2 depth)^(1/4)``, its beta too).
        batch, seq, vocab: the probe.

    Returns:
        ``{"rms": {placement: [n_seeds, depth]}, "grad": {placement: [n_seeds, depth]}, "depth",
        "seeds", "norm", "alpha"}``, float64 arrays, input side first.

    Raises:
        ValueError: what :class:`normref.TransformerStack` raises for a bad configuration.

    Source: Kim et al. 2025 (Peri-LN), hidden-state variance per layer; Xiong et al. 2020, Fig. 3.
    """
    import torch
    import torch.nn.functional as F

    from .blocks import TransformerStack, layer_grad_norms

    out = {"rms": {}, "grad": {}, "depth": depth, "seeds": tuple(seeds), "norm": norm, "alpha": alpha}
    with one_thread():
        for placement in placements:
            rms, grad = [], []
            for seed in seeds:
                torch.manual_seed(seed)
                deep = {"alpha": alpha} if placement == "deep" and alpha is not None else {}
                stack = TransformerStack(depth, dim, n_heads, norm=norm, placement=placement, **deep)
                head = torch.nn.Linear(dim, vocab, bias=False)
                g = torch.Generator().manual_seed(seed)
                x = torch.randn(batch, seq, dim, generator=g)  # [B, T, D]
                targets = torch.randint(0, vocab, (batch, seq), generator=g)  # [B, T]
                y, hidden = stack(x, return_hidden=True)
                F.cross_entropy(head(y).flatten(0, 1), targets.flatten()).backward()
                rms.append(_rms_per_layer(hidden))
                grad.append(layer_grad_norms(stack, XIONG_PARAM))
            out["rms"][placement] = np.array(rms)
            out["grad"][placement] = np.array(grad)
    return out


def _tiny_lm(placement: str, norm: str, qk_norm, cfg: dict):
    import torch
    from torch import nn

    from .blocks import TransformerStack

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(cfg["vocab"], cfg["dim"])
            self.pos = nn.Embedding(cfg["seq"], cfg["dim"])
            self.stack = TransformerStack(cfg["depth"], cfg["dim"], cfg["n_heads"], norm=norm,
                                          placement=placement, qk_norm=qk_norm)
            self.head = nn.Linear(cfg["dim"], cfg["vocab"], bias=False)

        def forward(self, idx, return_hidden: bool = False):  # idx: [B, T]
            h = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))  # [B, T, D]
            y, hidden = self.stack(h, return_hidden=True)
            logits = self.head(y)  # [B, T, vocab]
            return (logits, hidden) if return_hidden else logits

    return TinyLM()


def train_tiny(placement: str = "pre", *, norm: str = "rms", qk_norm: str | None = None, lr: float = 0.1,
               steps: int = 40, seed: int = 0, record_logits: bool = True, record_norm_io: bool = False,
               **model) -> dict:
    """Train the tiny language model (:data:`TINY`) with one placement: Adam, fixed learning rate.

    Model: token and position embeddings, a :class:`normref.TransformerStack` (``placement``,
    ``norm``, ``qk_norm``), a linear head; data and batch order as lesson 03 (Markov chain, best
    loss ln 2). Every step records the loss and the largest ``|logit|`` of every attention head
    of every layer (:meth:`normref.CausalSelfAttention.logits`, before the mask); before the
    first step and after the last, the hidden-state RMS per layer on a fixed batch of 32
    sequences. About 20 ms of one CPU core per step.

    Args:
        placement, norm, qk_norm: the stack (``norm``: ``"rms"``, ``"layer"`` or ``"dyt"``).
        lr, steps: Adam (betas 0.9, 0.98) at this fixed learning rate, for this many steps.
        seed: weights and batch order.
        record_logits: record the largest attention logit of every step (it recomputes every
            layer's queries and keys once more; False: ``"max_logit"`` is empty).
        record_norm_io: also return, after training, what every norm of the stack received
            (``"norm_inputs"``: a list of ``[32, seq, dim]`` float64 arrays, module order).
        **model: overrides of :data:`TINY` (``depth``, ``dim``, ``n_heads``, ``batch``, ...).

    Returns:
        ``{"loss": [steps], "max_logit": [steps] (or [0]), "rms_init": [depth], "rms_final": [depth],
        "placement", "norm", "qk_norm", "lr", "seed", "steps"}`` (float64 arrays; a loss that
        became NaN or inf is kept as it was).

    Raises:
        ValueError: what :class:`normref.TransformerStack` raises, or an unknown key in ``model``.

    Source: Kim et al. 2025 (Pre-LN vs Peri-LN at high learning rates); Dehghani et al. 2023 and
    Team OLMo 2024 (attention logit growth, QK-norm); Zhu et al. 2025 (DyT).
    """
    import torch

    unknown = set(model) - set(TINY)
    if unknown:
        raise ValueError(f"train_tiny: unknown model option(s) {sorted(unknown)}; known: {sorted(TINY)}")
    cfg = {**TINY, **model}
    data = _data(cfg["vocab"], cfg["seq"])
    evaluation = data[:32, :-1]  # [32, seq]
    with one_thread():
        torch.manual_seed(seed)
        lm = _tiny_lm(placement, norm, qk_norm, cfg)
        with torch.no_grad():
            rms_init = _rms_per_layer(lm(evaluation, return_hidden=True)[1])
        losses, peaks = _train_steps(lm, data, cfg["batch"], lr, steps, seed, record_logits)
        rms_final, norm_io = _final_pass(lm, evaluation, record_norm_io)
    out = {"loss": np.array(losses), "max_logit": np.array(peaks), "rms_init": rms_init,
           "rms_final": rms_final, "placement": placement, "norm": norm, "qk_norm": qk_norm, "lr": lr,
           "seed": seed, "steps": steps}
    out.update(norm_io)
    return out


def _train_steps(lm, data, batch: int, lr: float, steps: int, seed: int, record_logits: bool) -> tuple[list, list]:
    """``steps`` Adam steps of ``lm`` on batches of ``data`` drawn in ``seed``'s order: the loss
    of each and (``record_logits``) the largest attention logit of each."""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.Adam(lm.parameters(), lr=lr, betas=(0.9, 0.98), foreach=True)
    order = torch.Generator().manual_seed(seed)
    seen: list[float] = []

    def watch(mod, inputs, output):  # the largest logit this layer's attention computed
        with torch.no_grad():
            seen.append(float(mod.logits(inputs[0]).abs().max()))

    hooks = [b.self_attn.register_forward_hook(watch) for b in lm.stack.layers] if record_logits else []
    losses, peaks = [], []
    try:
        for _ in range(steps):
            idx = data[torch.randint(0, len(data), (batch,), generator=order)]  # [B, T + 1]
            seen.clear()
            loss = F.cross_entropy(lm(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if seen:
                peaks.append(max(seen))
    finally:
        for h in hooks:
            h.remove()
    return losses, peaks


def _final_pass(lm, evaluation, record_norm_io: bool) -> tuple[np.ndarray, dict]:
    """The hidden-state RMS per layer on ``evaluation``, and (``record_norm_io``) what every
    norm of the stack received: ``{"norm_inputs", "norm_names", "norm_eps"}``, else ``{}``."""
    import torch

    from .modules import DyT, LayerNorm, RMSNorm

    inputs: list = []
    norms = [(n, m) for n, m in lm.stack.named_modules() if isinstance(m, (RMSNorm, LayerNorm, DyT))]
    grab = [m.register_forward_hook(lambda m, i, o: inputs.append(i[0].detach().double().numpy()))
            for _, m in norms] if record_norm_io else []
    with torch.no_grad():
        rms_final = _rms_per_layer(lm(evaluation, return_hidden=True)[1])
    for h in grab:
        h.remove()
    if not record_norm_io:
        return rms_final, {}
    return rms_final, {"norm_inputs": inputs, "norm_names": [_pretty(n) for n, _ in norms],
                       "norm_eps": [getattr(m, "eps", None) for _, m in norms]}


def _pretty(name: str) -> str:
    """``"layers.2.input_layernorm"`` -> ``"block 3, input_layernorm"``; ``"norm"`` -> ``"final norm"``."""
    parts = name.split(".")
    if len(parts) >= 3 and parts[0] == "layers":
        return f"block {int(parts[1]) + 1}, {'.'.join(parts[2:])}"
    return "final norm" if name == "norm" else name


def train_runs(configs, *, seeds=(0, 1, 2), **kwargs) -> dict:
    """:func:`train_tiny` for each configuration and seed.

    Args:
        configs: ``{label: {train_tiny keyword: value}}``, e.g. ``{"pre": {"placement": "pre"},
            "pre + QK-norm": {"placement": "pre", "qk_norm": "rms"}}``.
        seeds: the seeds of every configuration.
        **kwargs: passed to every run (``lr``, ``steps``, ...); a configuration's own win.

    Returns:
        ``{label: [run per seed]}`` (each run as :func:`train_tiny` returns it).
    """
    return {label: [train_tiny(**{**kwargs, **cfg}, seed=s) for s in seeds] for label, cfg in configs.items()}


def _settings(seeds) -> dict:
    """What the stored runs depend on; :func:`lesson_runs` refuses a file made with other settings."""
    return {"tiny": TINY, "groups": {g: {"lr": lr, "configs": c} for g, (c, lr) in GROUPS.items()},
            "steps": _STEPS, "seeds": list(seeds), "data_seed": 123}


def _ln_fits(run: dict) -> list[dict]:
    """Each LayerNorm's :func:`ln_tanh_fit` of a ``record_norm_io`` run (the points themselves dropped)."""
    return [{k: m[k] for k in ("name", "alpha", "lam", "r2_tanh", "r2_line", "slope")} for m in layer_norm_maps(run)]


def _train_groups(seeds, progress: bool) -> dict:
    jobs = [(g, label, cfg, lr, s) for g, (configs, lr) in GROUPS.items() for label, cfg in configs.items()
            for s in seeds]
    if progress:
        from tqdm.auto import tqdm

        jobs = tqdm(jobs, desc="training lesson 04's runs", unit="run")
    runs: dict = {g: {label: [] for label in configs} for g, (configs, _) in GROUPS.items()}
    for g, label, cfg, lr, s in jobs:
        run = train_tiny(**cfg, lr=lr, steps=_STEPS, seed=s)
        if run.get("norm_inputs") is not None:
            run["ln_fits"] = _ln_fits(run)
            for k in ("norm_inputs", "norm_names", "norm_eps"):
                run.pop(k)
        runs[g][label].append(run)
    return runs


def lesson_runs(*, recompute: bool = False, seeds=SEEDS, progress: bool = True, path=None) -> dict:
    """Every run lesson 04 draws: each group of :data:`GROUPS` on every seed.

    Read from :data:`RUNS_FILE` (trained once by ``tools/modern_runs.py`` with this function's
    ``recompute=True``), so the lesson runs in seconds; ``recompute=True`` trains them again here
    (60 runs of :func:`train_tiny`, about 20 s of one CPU core, with a progress bar).

    Args:
        recompute: train instead of reading the file.
        seeds: the seeds (reading: must be the file's, :data:`SEEDS`).
        progress: a progress bar while training.
        path: the file to read (default :data:`RUNS_FILE`).

    Returns:
        ``{"low": {label: [run per seed]}, "high": ..., "qk": ..., "dyt": ...}``, each run as
        :func:`train_tiny` returns it (float64 arrays); the ``"dyt"`` group's LayerNorm runs carry
        ``"ln_fits"`` (:func:`ln_tanh_fit` of every norm) instead of the norms' inputs.

    Raises:
        FileNotFoundError: the file is missing (``recompute=True`` needs none).
        ValueError: the file was made with other settings or seeds than these.
    """
    if recompute:
        return _train_groups(seeds, progress)
    path = Path(path or RUNS_FILE)
    stored = json.loads(path.read_text())
    if stored["settings"] != json.loads(json.dumps(_settings(seeds))):
        raise ValueError(f"{path} holds runs made with other settings or seeds than these ({list(seeds)}): "
                         "call lesson_runs(recompute=True), or rewrite it with tools/modern_runs.py")
    for group in stored["runs"].values():
        for rs in group.values():
            for r in rs:
                for k in _RUN_KEYS:
                    r[k] = np.array(r[k], dtype=np.float64)
    return stored["runs"]


def write_lesson_runs(path=None, *, seeds=SEEDS, progress: bool = True) -> Path:
    """Train :func:`lesson_runs` (``recompute=True``) and write them to ``path`` (default
    :data:`RUNS_FILE`) as JSON: every number to 7 significant digits. Returns the path."""
    runs = lesson_runs(recompute=True, seeds=seeds, progress=progress)

    def num(v):
        return float(f"{float(v):.7g}")

    for group in runs.values():
        for rs in group.values():
            for r in rs:
                for k in _RUN_KEYS:
                    r[k] = [num(v) for v in np.asarray(r[k]).ravel()]
                for f in r.get("ln_fits", []):
                    f.update({k: num(v) for k, v in f.items() if k != "name"})
    path = Path(path or RUNS_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    import torch

    path.write_text(json.dumps({"settings": _settings(seeds), "torch": torch.__version__, "runs": runs},
                               separators=(",", ":")) + "\n")
    return path


def loss_levels(vocab: int = TINY["vocab"], seq: int = TINY["seq"]) -> dict:
    """The three loss levels of lesson 03's chain (nats): ``"uniform"`` (ln vocab), ``"unigram"``
    (the entropy of the next token's frequencies: a model that learned nothing of the chain),
    ``"optimal"`` (ln 2)."""
    data = np.asarray(_data(vocab, seq)[:, 1:]).ravel()
    freq = np.bincount(data, minlength=vocab) / data.size
    freq = freq[freq > 0]
    return {"uniform": float(np.log(vocab)), "unigram": float(-(freq * np.log(freq)).sum()),
            "optimal": float(np.log(2.0))}


def stalled(runs: list[dict], level: float, *, within: float = 0.1) -> list[int]:
    """The seeds whose run ends within ``within`` nats of ``level`` (e.g. the token-frequency
    entropy, where a model that learned nothing of the chain sits) or above it."""
    return [r["seed"] for r in runs if final_loss(r) >= level - within]


def spike_words(runs: dict, labels=("pre", "peri", "output"), *, first: int = 10, at: int = 20) -> str:
    """The early loss spike and the recovery of each configuration in words, from the runs: the
    largest loss of the first ``first`` steps and the loss at step ``at``, min-max over seeds, e.g.
    "largest loss of steps 1-10: Pre-LN 3.56-5.82, Peri-LN 3.01-5.27; at step 20: Pre-LN 1.43-1.88,
    Peri-LN 0.85-0.98 nats (seeds 0, 1, 2, 3, 4)"."""
    from .placements import PLACEMENTS

    def span(v):
        lo, hi = f"{min(v):.2f}", f"{max(v):.2f}"
        return lo if lo == hi else f"{lo}-{hi}"

    name = {k: (PLACEMENTS[k][0] if k in PLACEMENTS else k) for k in labels}
    peaks = {k: [float(np.max(r["loss"][:first])) for r in runs[k]] for k in labels}
    later = {k: [float(r["loss"][at - 1]) for r in runs[k]] for k in labels}
    seeds = ", ".join(str(r["seed"]) for r in runs[labels[0]])
    return (f"largest loss of steps 1-{first}: " + ", ".join(f"{name[k]} {span(peaks[k])}" for k in labels)
            + f"; at step {at}: " + ", ".join(f"{name[k]} {span(later[k])}" for k in labels)
            + f" nats (seeds {seeds})")


def final_loss(run: dict, last: int = 10) -> float:
    """Mean training loss of the last ``last`` steps of one run (inf if any of them is not finite)."""
    tail = np.asarray(run["loss"][-last:], dtype=np.float64)
    return float(tail.mean()) if np.all(np.isfinite(tail)) else float("inf")


def lr_contrast(runs: dict, a: str, b: str, *, margin: float = 0.1) -> dict:
    """Does configuration ``b`` end below ``a`` on every seed, by at least ``margin`` nats?

    Args:
        runs: :func:`train_runs`' result holding ``a`` and ``b`` (same seeds, same learning rate).
        a, b: two labels, e.g. ``"pre"`` and ``"peri"``.
        margin: the smallest gap that counts.

    Returns:
        ``{"seeds": [...], a: [final loss per seed], b: [...], "gap": [a - b per seed],
        "holds": bool (every gap >= margin), "lr": the runs' learning rate}``.
    """
    fa = [final_loss(r) for r in runs[a]]
    fb = [final_loss(r) for r in runs[b]]
    gap = [x - y for x, y in zip(fa, fb)]
    return {"seeds": [r["seed"] for r in runs[a]], a: fa, b: fb, "gap": gap,
            "holds": all(g >= margin for g in gap), "lr": runs[a][0]["lr"], "margin": margin}


def ln_tanh_fit(x, y, alphas=LN_FIT_ALPHAS) -> dict:
    """Fit ``y ~ lam * tanh(alpha * x)`` (least squares in ``lam`` for each alpha of a grid) and
    ``y ~ slope * x``, over every point of a norm's input ``x`` and output ``y``.

    Args:
        x, y: arrays of the same shape (e.g. ``[N, T, D]``: a LayerNorm's input and its output
            before gamma and beta), any float dtype; flattened.
        alphas: the grid of alphas tried.

    Returns:
        ``{"alpha", "lam", "r2_tanh", "r2_line", "slope", "x_max"}`` (floats): the best tanh and
        the best line through 0, each with its share of ``y``'s variance explained.

    Raises:
        ValueError: ``x`` and ``y`` differ in size, or are empty.

    Source: Zhu et al. 2025, section 3 (LayerNorm's input-output map in trained ViT, wav2vec 2.0
    and DiT is S-shaped, "highly resembling a tanh function").
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.size != y.size or x.size == 0:
        raise ValueError(f"ln_tanh_fit: x and y must have the same, nonzero size, got {x.size} and {y.size}")
    var = float(np.mean((y - y.mean()) ** 2)) or 1.0
    alphas = np.asarray(alphas, dtype=np.float64)
    best = None
    for chunk in np.array_split(alphas, max(1, alphas.size // 16)):  # [16, N] at a time
        t = np.tanh(np.outer(chunk, x))  # [a, N]
        tt = np.einsum("an,an->a", t, t)
        ty = t @ y
        ok = tt > 0
        lam = np.where(ok, ty / np.where(ok, tt, 1.0), 0.0)
        # mean((y - lam t)^2) = (y.y - 2 lam t.y + lam^2 t.t) / N
        err = (float(y @ y) - 2 * lam * ty + lam ** 2 * tt) / x.size
        err = np.where(ok, err, np.inf)
        i = int(np.argmin(err))
        if best is None or err[i] < best[0]:
            best = (float(err[i]), float(chunk[i]), float(lam[i]))
    slope = float(x @ y) / float(x @ x) if float(x @ x) else 0.0
    err_line = float(np.mean((y - slope * x) ** 2))
    return {"alpha": best[1], "lam": best[2], "r2_tanh": 1 - best[0] / var, "r2_line": 1 - err_line / var,
            "slope": slope, "x_max": float(np.abs(x).max())}


def layer_norm_maps(run: dict) -> list[dict]:
    """For a run of :func:`train_tiny` with ``norm="layer"`` and ``record_norm_io=True``: each
    LayerNorm's input and its output before gamma and beta (float64), with :func:`ln_tanh_fit`.

    Returns:
        ``[{"index", "name", "x", "y", **fit}]`` in module order (``name`` like ``"block 3,
        input_layernorm"``, ``"final norm"``).

    Raises:
        KeyError: the run did not record the norms' inputs.
    """
    from .functional import layer_norm

    out = []
    for i, (x, name, eps) in enumerate(zip(run["norm_inputs"], run["norm_names"], run["norm_eps"])):
        y = layer_norm(x, eps=eps)  # the map before gamma and beta
        out.append({"index": i, "name": name, "x": x, "y": y, **ln_tanh_fit(x, y)})
    return out


def tanh_gain(maps: list[dict]) -> np.ndarray:
    """``r2_tanh - r2_line`` of each LayerNorm (how much better the tanh explains the map)."""
    return np.array([m["r2_tanh"] - m["r2_line"] for m in maps])


def _isfinite(v) -> bool:
    return bool(np.all(np.isfinite(np.asarray(v, dtype=np.float64))))


def summary_row(runs: list[dict]) -> dict:
    """One configuration's runs in numbers: per seed, the final loss, the largest attention
    logit of the run, and the last layer's hidden-state RMS at init and after training."""
    return {"seeds": [r["seed"] for r in runs], "final_loss": [final_loss(r) for r in runs],
            "max_logit": [float(np.nanmax(r["max_logit"])) if len(r["max_logit"]) else math.nan for r in runs],
            "rms_init_last": [float(r["rms_init"][-1]) for r in runs],
            "rms_final_last": [float(r["rms_final"][-1]) for r in runs],
            "finite": [_isfinite(r["loss"]) for r in runs]}


def contrast_words(c: dict, a: str, b: str) -> str:
    """:func:`lr_contrast`'s result in one sentence, e.g. "at lr 0.1 Peri-LN ends below Pre-LN on
    every seed (0, 1, 2), by 0.31 to 0.60 nats" or "... the gap is -0.02 to 0.01 nats: no contrast
    here (the lesson's threshold: 0.1)"."""
    from .placements import PLACEMENTS

    na, nb = (PLACEMENTS[k][0] if k in PLACEMENTS else k for k in (a, b))
    gap = np.round(np.asarray(c["gap"], dtype=np.float64), 2) + 0.0  # + 0.0: no "-0.00"
    seeds = ", ".join(map(str, c["seeds"]))
    if c["holds"]:
        return (f"at lr {c['lr']:g} {nb} ends below {na} on every seed ({seeds}), by {gap.min():.2f} to "
                f"{gap.max():.2f} nats")
    return (f"at lr {c['lr']:g} the gap {na} - {nb} is {gap.min():.2f} to {gap.max():.2f} nats over seeds "
            f"{seeds}: no contrast here (the threshold: {c['margin']:g} nats on every seed)")
