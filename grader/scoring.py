"""Trusted scoring: the graded batteries' inputs drawn from a secret seed, and their scores
computed in the grader's own process.

For every question in :data:`QUESTIONS` (the code questions' full batteries):

1. :func:`prepare_inputs`, before autograde, draws a new battery from a secret seed (new per
   grading run, written to ``logs/scoring/`` with the run, never where a kernel can read it)
   covering the kinds of case of the visible battery: a small token, ``[B, T, D]`` with a
   trained gamma (and beta), ``B = T = D``, tiny values with eps = 1e-4 (where eps sits), the
   float16 overflow row, bfloat16, a constant row (LayerNorm). It runs the course's own checker
   on those cases with a probe in place of the student's function, and saves the calls the
   checker makes (arguments and keyword arguments) to ``<inputs>/<grade_id>.pt``: the kernel's
   only view of the question (``NORMREF_HANDBACK_DIR``, read-only in the sandbox).
2. In the kernel, the hidden test ``hand_back(grade_id, fn)`` (:mod:`normref.handback`) makes
   those calls and shows the outputs (or exceptions) as one output of its MIME type.
3. :func:`score_notebook`, after autograde, reads that output from the autograded notebook
   (nothing pickled: arrays as ``.npy``, tensors with dtype and shape), replays it through
   the same checker on the same cases (:class:`Replay` stands in for the student's function),
   and :func:`score_class` writes ``points x score`` into nbgrader's gradebook (``Grade``
   rows) and the checker's diagnosis into the autograded notebook (what the feedback shows).

A cell that hands back no outputs, or more than one set, scores 0 (flagged when it is more
than one). The student's code never sees a score, a checker or the reference's outputs.
"""
from __future__ import annotations

import base64
import builtins
import io
import json
import os
import secrets
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from unittest import mock

import nbformat
import numpy as np

from normref.faults import output_metadata
from normref.handback import ENV, MIME

__all__ = ["QUESTIONS", "prepare_inputs", "score_notebook", "score_class", "Replay", "Scored"]


# --------------------------------------------------------------------------- drawn batteries


def _gen(seed: int, grade_id: str):
    """A torch generator for one question, from the run's seed and the question's name."""
    import hashlib

    import torch

    h = int.from_bytes(hashlib.sha256(f"{seed}:{grade_id}".encode()).digest()[:8], "little")
    return torch.Generator().manual_seed(h & (2**63 - 1))


def _token(g):
    """Three distinct small integers as floats, of nonzero mean: the kind of the seed's
    (1, 2, 3) (a zero mean would let RMSNorm and LayerNorm agree on it)."""
    import torch

    while True:
        t = torch.randint(-6, 7, (3,), generator=g).float()
        if len(set(t.tolist())) == 3 and abs(float(t.sum())) >= 3:
            return t


def _pick(g, options):
    import torch

    return options[int(torch.randint(len(options), (1,), generator=g))]


def _with_std(x, std):
    """``x`` ([..., D]) with each token rescaled about its mean to this (biased) std."""
    mean = x.mean(-1, keepdim=True)
    c = x - mean
    return mean + c / c.pow(2).mean(-1, keepdim=True).sqrt() * std


def draw_norm_battery(kind: str, backend: str, g) -> list:
    """A drawn RMSNorm (``kind="rms"``) or LayerNorm (``"layer"``) battery for ``backend``
    (``"torch"``: six cases for rms, seven for layer; ``"numpy"``: without bfloat16), the
    kinds of case of :func:`normref.checks.norms.battery` with new numbers and shapes."""
    import torch

    from normref.checks.norms import NormCase
    from normref.functional import LAYER_NORM_EPS, RMS_NORM_EPS

    eps = RMS_NORM_EPS if kind == "rms" else LAYER_NORM_EPS

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    bias = (lambda b: b) if kind == "layer" else (lambda b: None)
    b_, t_, d = _pick(g, [2, 3]), _pick(g, [3, 4, 5]), _pick(g, [6, 8, 10])
    n = _pick(g, [3, 4, 5])
    d2 = _pick(g, [4, 5, 6, 7])
    big = float(_pick(g, [264, 300, 384, 500, 640, 1000]))
    tok = _token(g)
    w, b = 1 + 0.5 * rnd(d), 0.1 * rnd(d)
    btd, nnn, tiny = rnd(b_, t_, d, shift=0.5), rnd(n, n, n, scale=2.0, shift=1.0), rnd(2, d2)
    if kind == "layer":
        # Where eps sits shows in float32 only on a token of small variance. Every token gets a
        # std between 1 and 2, but one of std 0.2 in [B, T, D] (both eps faults show) and one
        # of std 0.4 in B = T = D (sqrt(var) + eps is within tolerance there, no eps is not).
        btd = _with_std(btd, 1 + torch.rand(b_, t_, 1, generator=g))
        nnn = _with_std(nnn, 1 + torch.rand(n, n, 1, generator=g))
        btd[0, 0] = _with_std(btd[0, 0], 0.2)
        nnn[0, 0] = _with_std(nnn[0, 0], 0.4)
        # tiny values: std 1e-3 to 2e-3 against eps = 1e-4, so var still shows (n-1 is seen)
        tiny = _with_std(tiny, 1e-3 * (1 + torch.rand(2, 1, generator=g)))
    else:  # RMS between 1 and 2 in every token: eps stays below float32's tolerance there
        btd = btd / btd.pow(2).mean(-1, keepdim=True).sqrt() * (1 + torch.rand(b_, t_, 1, generator=g))
        nnn = nnn / nnn.pow(2).mean(-1, keepdim=True).sqrt() * (1 + torch.rand(n, n, 1, generator=g))
        tiny = tiny / tiny.pow(2).mean(-1, keepdim=True).sqrt() * 1e-3 * (1 + torch.rand(2, 1, generator=g))
    cases = [
        NormCase(f"token {tuple(int(v) for v in tok.tolist())}", tok, torch.ones(3), bias(torch.zeros(3)), eps),
        NormCase(f"[{b_}, {t_}, {d}] float32 with a trained gamma", btd, w, bias(b), eps),
        NormCase(f"B = T = D [{n}, {n}, {n}] (a wrong axis still broadcasts)", nnn,
                 1 + 0.5 * rnd(n), bias(0.1 * rnd(n)), eps),
        NormCase(f"tiny values 1e-3 [2, {d2}] with eps=1e-4 (where eps sits matters)", tiny,
                 torch.ones(d2), bias(torch.zeros(d2)), 1e-4),
        NormCase(f"float16 row [{big:g}, -{big:g}, {big:g}, -{big:g}] (x**2 overflows float16)",
                 torch.stack([torch.tensor([big, -big, big, -big]), rnd(4, shift=2.5)]).to(torch.float16),
                 torch.ones(4), bias(torch.zeros(4)), eps),
        NormCase(f"bfloat16 [{b_}, {t_}, 8]", rnd(b_, t_, 8).to(torch.bfloat16), 1 + 0.5 * rnd(8),
                 bias(0.1 * rnd(8)), eps),
    ]
    if kind == "layer":
        c = float(_pick(g, [-3, 2, 5, 7]))
        cases.append(NormCase(f"constant row [{c:g}] * 4 (variance 0: output must be beta)",
                              torch.stack([torch.full((4,), c), _with_std(rnd(4), 1.0)]), torch.ones(4),
                              0.5 * rnd(4), eps))
    if backend == "numpy":
        def conv(t):
            return None if t is None else t.numpy()

        cases = [NormCase(c.name, conv(c.x), conv(c.weight), conv(c.bias), c.eps)
                 for c in cases if c.x.dtype != torch.bfloat16]
    return cases


def draw_backward_battery(g) -> list:
    """A drawn LayerNorm-backward battery (float64 numpy): a token with a one-hot ``dy``,
    ``[B, T, D]`` with a trained gamma, ``B = T = D``, tiny values with eps = 1e-4."""
    import torch

    from normref.checks.backward import _BackwardCase
    from normref.functional import LAYER_NORM_EPS

    def rnd(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift).numpy()

    tok = np.sort(_token(g).double().numpy())  # dy = (1, 0, 0) on the smallest: every term shows
    dy = np.array([1.0, 0.0, 0.0])
    b_, t_, d, n, d2 = _pick(g, [2, 3]), _pick(g, [3, 4]), _pick(g, [6, 8]), _pick(g, [3, 4, 5]), _pick(g, [4, 5, 6])
    return [
        _BackwardCase(f"token {tuple(int(v) for v in tok)} with dy = (1, 0, 0)", dy, tok, np.ones(3), LAYER_NORM_EPS),
        _BackwardCase(f"[{b_}, {t_}, {d}] with a trained gamma", rnd(b_, t_, d), rnd(b_, t_, d, shift=0.5),
                      1 + 0.5 * rnd(d), LAYER_NORM_EPS),
        _BackwardCase(f"B = T = D [{n}, {n}, {n}] (a wrong axis still broadcasts)", rnd(n, n, n),
                      rnd(n, n, n, scale=2.0, shift=1.0), 1 + 0.5 * rnd(n), LAYER_NORM_EPS),
        _BackwardCase(f"tiny values 1e-3 [2, {d2}] with eps=1e-4 (where eps sits matters)", rnd(2, d2),
                      rnd(2, d2, scale=1e-3), 1 + 0.5 * rnd(d2), 1e-4),
    ]


def draw_placement_battery(g) -> list:
    """A drawn Pre-/Post-LN battery: a token through F(v) = 2v (a linear map) and LayerNorm
    without eps; ``[B, T, 8]`` through tanh(v W + c) and an RMSNorm with a trained gamma;
    ``B = T = D`` through tanh(v W + c) and a LayerNorm with gamma and beta; ``[2, T, 8]``
    through causal self-attention and an RMSNorm. Every object is the course's own class."""
    import torch
    from torch import nn

    from normref.blocks import CausalSelfAttention
    from normref.checks.placement import ToySublayer, _PlacementCase
    from normref.modules import LayerNorm, RMSNorm

    def rnd(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    def seed():
        return int(torch.randint(2**31 - 1, (1,), generator=g))

    twice = nn.Linear(3, 3, bias=False)
    with torch.no_grad():
        twice.weight.copy_(2 * torch.eye(3))
    b_, t_, n, t2 = _pick(g, [2, 3]), _pick(g, [3, 4]), _pick(g, [3, 4, 5]), _pick(g, [4, 5, 6])
    rms8, ln = RMSNorm(8), LayerNorm(n)
    with torch.no_grad():
        rms8.weight.copy_(1 + 0.5 * rnd(8))
        ln.weight.copy_(1 + 0.5 * rnd(n))
        ln.bias.copy_(0.3 * rnd(n))
    with torch.random.fork_rng():
        torch.manual_seed(seed())
        attn = CausalSelfAttention(8, 2)
    rms8b = RMSNorm(8)
    with torch.no_grad():
        rms8b.weight.copy_(1 + 0.5 * rnd(8))
    tok = _token(g)
    return [
        _PlacementCase(f"token {tuple(int(v) for v in tok.tolist())}, F(v) = 2v, LayerNorm without eps",
                       tok, twice, LayerNorm(3, eps=0.0)),
        _PlacementCase(f"[{b_}, {t_}, 8], F(v) = tanh(v W + c), RMSNorm with a trained gamma",
                       rnd(b_, t_, 8, scale=2.0, shift=0.5), ToySublayer(8, seed()), rms8),
        _PlacementCase(f"B = T = D [{n}, {n}, {n}], F(v) = tanh(v W + c), LayerNorm with gamma and beta",
                       rnd(n, n, n, scale=3.0, shift=1.0), ToySublayer(n, seed()), ln),
        _PlacementCase(f"[2, {t2}, 8], F = causal self-attention, RMSNorm", rnd(2, t2, 8, scale=2.0), attn, rms8b),
    ]


#: torch functions and ops that compute a normalization (names as a TorchFunctionMode sees them).
TORCH_NORMS = ("layer_norm", "rms_norm", "group_norm", "instance_norm", "batch_norm", "native_layer_norm",
               "_fused_rms_norm", "native_batch_norm", "native_group_norm", "local_response_norm")
NORMREF_NORMS = ("normref.functional.layer_norm", "normref.functional.rms_norm", "normref.modules.LayerNorm.forward",
                 "normref.modules.RMSNorm.forward", "normref.blocks.TransformerBlock.forward")
NORMREF_PLACEMENT = ("normref.blocks.pre_ln", "normref.blocks.post_ln", "normref.blocks.TransformerBlock.forward")
NORMREF_BACKWARD = ("normref.backward.layer_norm_backward", "normref.backward.rms_norm_backward")


@dataclass(frozen=True)
class Question:
    """One question scored outside the kernel: its checker, where that checker gets its
    battery (``module.attr``, replaced by the drawn one while the grader runs it), what counts
    as calling the reference (:class:`normref.handback.ReferenceRecorder`'s arguments), and
    whose words the rule is stated in."""

    check: Callable
    module: str | None
    attr: str | None
    draw: Callable | None
    reference: dict = field(default_factory=dict)
    backend: str = "torch"
    #: a visible check: the checker's own (public) cases, all or nothing; ``public`` names
    #: that checker and its arguments, so the kernel makes the public calls itself
    all_or_nothing: bool = False
    public: tuple | None = None


def _checks():
    from normref import checks

    return checks


_NORMS = {"torch_names": TORCH_NORMS, "normref_names": NORMREF_NORMS}
QUESTIONS: dict[str, Question] = {
    "rms_norm_battery": Question(lambda fn: _checks().check_rms_norm(fn), "normref.checks.norms", "battery",
                                 lambda g: draw_norm_battery("rms", "torch", g), _NORMS),
    "layer_norm_battery": Question(lambda fn: _checks().check_layer_norm(fn, "numpy"), "normref.checks.norms",
                                   "battery", lambda g: draw_norm_battery("layer", "numpy", g), _NORMS, "numpy"),
    "layer_norm_backward_gradcheck": Question(
        lambda fn: _checks().check_layer_norm_backward(fn), "normref.checks.backward", "_backward_battery",
        draw_backward_battery, {"torch_names": TORCH_NORMS + ("native_layer_norm_backward",),
                                "normref_names": NORMREF_NORMS + NORMREF_BACKWARD}, "numpy"),
    "pre_ln_battery": Question(lambda fn: _checks().check_pre_ln(fn), "normref.checks.placement",
                               "_placement_battery", draw_placement_battery, {"normref_names": NORMREF_PLACEMENT}),
    "post_ln_battery": Question(lambda fn: _checks().check_post_ln(fn), "normref.checks.placement",
                                "_placement_battery", draw_placement_battery, {"normref_names": NORMREF_PLACEMENT}),
}
# The visible checks are scored outside the kernel too, on their public cases, all or nothing.
_VISIBLE = {  # grade_id: (checker, its arguments after fn, cases counted, the battery's question)
    "rms_norm_shape": ("check_rms_norm", ((), {"quick": True}), None, "rms_norm_battery"),
    "layer_norm_seed": ("check_layer_norm", (("numpy",), {"quick": True}), None, "layer_norm_battery"),
    "layer_norm_backward_seed": ("check_layer_norm_backward", ((), {}), 2, "layer_norm_backward_gradcheck"),
    "pre_ln_quick": ("check_pre_ln", ((), {}), 2, "pre_ln_battery"),
    "post_ln_quick": ("check_post_ln", ((), {}), 2, "post_ln_battery"),
}


def _public_check(name: str, args: tuple, kwargs: dict, head: int | None) -> Callable:
    def check(fn):
        result = getattr(_checks(), name)(fn, *args, **kwargs)
        return result if head is None else result.head(head)

    return check


for _gid, (_name, (_args, _kwargs), _head, _battery) in _VISIBLE.items():
    QUESTIONS[_gid] = Question(_public_check(_name, _args, _kwargs, _head), None, None, None,
                               QUESTIONS[_battery].reference, QUESTIONS[_battery].backend,
                               all_or_nothing=True, public=(_name, _args, _kwargs))


@contextmanager
def _drawn(q: Question, cases: list):
    import importlib

    module = importlib.import_module(q.module)
    with mock.patch.object(module, q.attr, lambda *a, **k: cases):
        yield


def drawn_cases(grade_id: str, seed: int) -> list:
    """The battery of ``grade_id`` for this seed (the same every time for one seed)."""
    return QUESTIONS[grade_id].draw(_gen(seed, grade_id))


def run_check(grade_id: str, seed: int, fn):
    """``grade_id``'s checker on its drawn battery (a visible check: on its own public cases),
    with ``fn`` as the student's function: a :class:`normref.checks.CheckResult`. (In grading
    ``fn`` is a :class:`Replay`.)"""
    q = QUESTIONS[grade_id]
    if q.draw is None:
        return q.check(fn)
    with _drawn(q, drawn_cases(grade_id, seed)):
        return q.check(fn)


# --------------------------------------------------------------------------- the inputs


def probe_calls(grade_id: str, seed: int) -> list[tuple[tuple, dict, bool]]:
    """The calls ``grade_id``'s checker makes of the student's function on the drawn battery:
    ``[(args, kwargs, grad enabled)]`` (copies, in order)."""
    from normref.handback import probe

    return probe(lambda fn: run_check(grade_id, seed, fn))


def new_seed() -> int:
    """A secret seed for one grading run."""
    return secrets.randbits(62)


def prepare_inputs(course_root: Path, *, seed: int | None = None, log=print,
                   set_env: bool = True) -> tuple[int, Path]:
    """Draw this run's graded inputs and point the kernels at them.

    Writes ``logs/handback/<grade_id>.pt`` (what the kernels may read) and appends the seed to
    ``logs/scoring/seeds.jsonl`` (what reproduces the grades; no kernel can read ``logs/``), and
    sets ``NORMREF_HANDBACK_DIR`` in this process's environment (unless ``set_env`` is
    False: then pass it to nbgrader yourself), which nbgrader's autograde processes and the
    sandbox inherit.

    Returns:
        ``(seed, inputs folder)``.
    """
    import torch

    root = Path(course_root)
    seed = new_seed() if seed is None else seed
    inputs = root / "logs" / "handback"
    inputs.mkdir(parents=True, exist_ok=True)
    for gid in QUESTIONS:
        q = QUESTIONS[gid]
        calls = None if q.public else probe_calls(gid, seed)  # public cases: the kernel makes them
        torch.save({"calls": calls, "public": q.public, "reference": q.reference}, inputs / f"{gid}.pt")
    seeds = root / "logs" / "scoring"
    seeds.mkdir(parents=True, exist_ok=True)
    with (seeds / "seeds.jsonl").open("a") as f:
        f.write(json.dumps({"time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "seed": seed,
                            "questions": sorted(QUESTIONS)}) + "\n")
    if set_env:
        os.environ[ENV] = str(inputs.resolve())
    log(f"scoring: graded inputs drawn for {len(QUESTIONS)} questions (seed in {seeds / 'seeds.jsonl'})")
    return seed, inputs


# --------------------------------------------------------------------------- the outputs


def _npy(s: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(s)), allow_pickle=False)


def _opaque(type_name: str):
    name = type_name if str(type_name).isidentifier() else "object"
    return type(name, (), {"__repr__": lambda self: f"<{name}>"})()


def decode(d: dict):
    """The inverse of :func:`normref.handback.encode` (no pickles: ``.npy`` and JSON only)."""
    import torch

    t = d.get("t")
    if t == "torch":
        dtype = getattr(torch, str(d.get("dtype")), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {d.get('dtype')!r}")
        return torch.from_numpy(np.array(_npy(d["npy"]))).to(dtype)
    if t == "numpy":
        return _npy(d["npy"])
    if t == "seq":
        items = [decode(i) for i in d.get("items", [])][:16]
        return list(items) if d.get("type") == "list" else tuple(items)
    if t == "py":
        v = d.get("value")
        return v if v is None or isinstance(v, (bool, int, float)) else _opaque(type(v).__name__)
    return _opaque(d.get("type", "object"))


def _exception(name: str, message: str) -> Exception:
    cls = getattr(builtins, name, None) if str(name).isidentifier() else None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = type(name if str(name).isidentifier() else "Error", (Exception,), {})
    try:
        return cls(message)
    except Exception:  # noqa: BLE001 - an exception class with odd arguments
        return RuntimeError(f"{name}: {message}")


class Replay:
    """Stands in for the student's function while the grader's checker runs: each call gives
    back what the student's function gave back on that call in the kernel (its output, its
    exception, a timeout), and modifies the inputs as the student's call did."""

    __name__ = "replay"

    def __init__(self, records: list[dict]):
        self.records = records
        self.i = 0

    def __call__(self, *args, **kwargs):
        import torch

        from normref.checks.core import _Timeout

        rec = self.records[self.i] if self.i < len(self.records) else {
            "raised": ["RuntimeError", "no output was handed back for this call"]}
        self.i += 1
        for k, enc in (rec.get("after") or {}).items():
            i = int(k)
            try:
                new = decode(enc)
                if isinstance(args[i], torch.Tensor) and args[i].shape == new.shape:
                    args[i].copy_(new)
                elif isinstance(args[i], np.ndarray) and args[i].shape == new.shape:
                    args[i][...] = new
            except (IndexError, ValueError, TypeError, RuntimeError, KeyError):
                pass
        if rec.get("timeout"):
            raise _Timeout()
        if "raised" in rec:
            name, message = (list(rec["raised"]) + ["", ""])[:2]
            raise _exception(str(name), str(message))
        return decode(rec.get("out", {}))


@dataclass
class Scored:
    """One question of one notebook, scored outside the kernel.

    Attributes:
        grade_id: the hidden test's cell.
        fraction: the checker's score on the drawn battery, 0..1.
        text: the diagnosis the feedback shows.
        flags: what the report should say (several hand-backs in one cell, a reference call).
        faults, variants: the diagnosed fault kinds, for the class report (output metadata).
    """

    grade_id: str
    fraction: float
    text: str
    flags: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)


def _handbacks(cell) -> list[dict]:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") in ("display_data", "execute_result") and MIME in o.get("data", {}):
            out.append(o["data"][MIME])
    return out


def score_notebook(nb, seed: int) -> dict[str, Scored]:
    """Score every :data:`QUESTIONS` cell of an autograded notebook from its handed-back
    outputs: ``{grade_id: Scored}``. A cell with no hand-back (the student's code never got
    there, e.g. the function is undefined) or several scores 0."""
    out = {}
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.cell_type != "code" or gid not in QUESTIONS:
            continue
        found = [h for h in _handbacks(cell) if isinstance(h, dict)]
        if len(found) != 1 or found[0].get("grade_id") != gid:
            flags = ([f"{gid}: {len(found)} sets of outputs in one test cell (one is handed back): scored 0"]
                     if len(found) > 1 else [])
            errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in cell.get("outputs", [])
                      if o.get("output_type") == "error"]
            why = errors[-1] if errors else "no outputs were handed back"
            out[gid] = Scored(gid, 0.0, f"{gid}: not graded ({why}): 0 points", flags)
            continue
        calls = found[0].get("calls")
        if isinstance(calls, dict) and "not_callable" in calls:
            result = run_check(gid, seed, _opaque(calls["not_callable"]))
            calls = []
        else:
            calls = calls if isinstance(calls, list) else []
            result = run_check(gid, seed, Replay(calls))
        refs = list(dict.fromkeys(str(w) for c in calls if isinstance(c, dict) for w in c.get("references", [])))
        text = ("The visible check, scored by the grader:\n" if QUESTIONS[gid].all_or_nothing
                else "Graded on new inputs drawn for this grading run:\n") + result.report()
        if refs:
            from normref.rules import rule_message

            rules = [rule_message(w, QUESTIONS[gid].backend) for w in refs]
            out[gid] = Scored(gid, 0.0, "\n".join([f"{gid}: 0 points"] + ["  x " + r for r in rules] + [text]),
                              [f"{gid}: {r} (seen while it ran): scored 0" for r in rules], ["reference_call"])
            continue
        fraction = float(result.passed) if QUESTIONS[gid].all_or_nothing else float(result.score)
        out[gid] = Scored(gid, fraction, text, [], result.faults, result.variants)
    return out


def score_class(course_root: Path, pairs, seed: int, *, db_url: str | None = None,
                log=print) -> dict[tuple[str, str], list[str]]:
    """Score every autograded notebook of ``pairs`` (``[(assignment, student)]``): write
    ``points x fraction`` into the gradebook's ``Grade`` rows (``auto_score``) and the
    diagnosis into the notebook's test cell (the feedback shows it).

    Returns:
        ``{(assignment, student): [flags]}`` for the report.
    """
    from nbgrader.api import Gradebook

    root = Path(course_root)
    url = db_url or f"sqlite:///{root / 'gradebook.db'}"
    flags: dict[tuple[str, str], list[str]] = {}
    with Gradebook(url) as gb:
        for a, st in pairs:
            for path in sorted((root / "autograded" / st / a).glob("*.ipynb")):
                nb = nbformat.read(path, as_version=4)
                scored = score_notebook(nb, seed)
                if not scored:
                    continue
                for cell in nb.cells:
                    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                    if gid in scored:
                        sc = scored[gid]
                        cell.outputs = [nbformat.v4.new_output(
                            "display_data", data={"text/plain": sc.text},
                            metadata=output_metadata(sc.faults, sc.variants))]
                for gid, s in scored.items():
                    try:
                        grade = gb.find_grade(gid, path.stem, a, st)
                    except Exception:  # noqa: BLE001 - nbgrader raises MissingEntry
                        continue
                    in_kernel = grade.auto_score
                    grade.auto_score = round(float(grade.max_score) * s.fraction, 2)
                    if (QUESTIONS[gid].all_or_nothing and in_kernel is not None and s.fraction == 0
                            and float(in_kernel) >= float(grade.max_score) > 0):
                        # same checker, same public inputs, same function: only a change made
                        # inside the kernel (or a function that is not deterministic) does this
                        s.flags.append(f"{gid}: the notebook's own check passed in its kernel, the grader's "
                                       "scoring of the same outputs did not (checkers changed at run time?): "
                                       "scored 0")
                    if s.flags:
                        flags.setdefault((a, st), []).extend(s.flags)
                gb.db.commit()
                nbformat.write(nb, path)
    return flags


# --------------------------------------------------------------------------- pipeline stages


def inputs_stage(b) -> None:
    """``grade_class`` stage before autograde: draw this run's graded inputs (a new seed)."""
    b.scoring_seed, _ = prepare_inputs(b.tree.root, log=b.log)


def scoring_stage(b) -> None:
    """``grade_class`` stage after autograde: score every graded notebook's handed-back
    outputs in this process and write the points into the gradebook; flags go to the report."""
    from .repair import Repair

    run = b.run
    pairs = list(run.autograde.graded) if run.autograde else []
    flags = score_class(b.tree.root, pairs, b.scoring_seed, db_url=b.tree.gradebook_url, log=b.log)
    for (a, st), notes in flags.items():
        run.repairs.setdefault((a, st), Repair(st, a)).flags.extend(notes)
    b.log(f"scoring: {len(pairs)} notebooks scored outside the kernels")
