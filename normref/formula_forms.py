"""What a residual formula computes, compared with the block's known wirings.

:func:`normref.answers.parse_formula` reduces a student's formula to a canonical string over
``X`` (the residual stream), ``N()`` (a norm), ``A()`` (the sublayer the question asks about)
and ``W()`` (the block's other sublayer): ``"Y = X + Attention(Norm(X))"`` -> ``"X+A(N(X))"``.
:func:`classify` evaluates that string as a function, on fixed random numbers with fixed
random sublayers and a LayerNorm, and names the known wiring it equals, whatever the order of
its sums or its spelling:

* one sublayer: Pre-LN ``X + F(Norm(X))`` (the answer), Post-LN, Output-LN, Peri-LN, a missing
  residual or norm, a residual from ``Norm(X)``;
* both sublayers, attention first as in every block of the course: the sequential Pre-LN block
  (``h = X + Attention(Norm(X))``, ``out = h + MLP(Norm(h))``, :func:`normref.checks.block`'s
  reference), the parallel block (the feed-forward network reads ``Norm(X)`` of the block's
  input: the block checker's ``mlp_reads_x``), the Post-LN block.

So the formula checker and the block checker share one notion of the Pre-LN block
(``tests/test_practice.py`` runs both on the same forms).

Source: Xiong et al. 2020, Figure 1 (Post-LN and Pre-LN); Wang and Komatsuzaki 2021 (GPT-J)
and Chowdhery et al. 2022, section 2 (PaLM), for the parallel block.
"""
from __future__ import annotations

import numpy as np

__all__ = ["ONE_SUBLAYER", "TWO_SUBLAYERS", "evaluate", "classify"]

_D = 8


def _setting():
    """Fixed numbers: X [5, D], two different nonlinear sublayers, a LayerNorm without eps."""
    rng = np.random.default_rng(16)
    X = rng.normal(size=(5, _D)) * 1.5 + 0.3
    wa, wb = rng.normal(size=(_D, _D)), rng.normal(size=(_D, _D))
    ba, bb = rng.normal(size=_D), rng.normal(size=_D)

    def attn(v):
        return np.tanh(v @ wa + ba)

    def ffn(v):
        return np.sin(v @ wb) + bb

    def norm(v):
        mu = v.mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(((v - mu) ** 2).mean(-1, keepdims=True))

    return X, attn, ffn, norm


#: one residual sublayer ``F`` (the asked one): name -> formula of (X, F, N)
ONE_SUBLAYER = {
    "pre_ln": lambda X, F, N: X + F(N(X)),
    "pre_post_swapped": lambda X, F, N: N(X + F(X)),
    "norm_on_sublayer_output": lambda X, F, N: X + N(F(X)),
    "is_peri_ln": lambda X, F, N: X + N(F(N(X))),
    "residual_from_normed": lambda X, F, N: N(X) + F(N(X)),
    "missing_norm": lambda X, F, N: X + F(X),
    "missing_residual": lambda X, F, N: F(N(X)),
    "missing_residual_post": lambda X, F, N: N(F(X)),
}


def _seq_pre(X, F1, F2, N):
    h = X + F1(N(X))  # the block checker's reference: h = x + attn(ln1(x)); out = h + mlp(ln2(h))
    return h + F2(N(h))


def _seq_post(X, F1, F2, N):
    h = N(X + F1(X))
    return N(h + F2(h))


#: both sublayers, ``F1`` first (attention), ``F2`` second (the feed-forward network)
TWO_SUBLAYERS = {
    "pre_ln_block": _seq_pre,
    "parallel_block": lambda X, F1, F2, N: X + F1(N(X)) + F2(N(X)),
    "post_ln_block": _seq_post,
}


class _Parser:
    """``X``, ``N(...)``, ``A(...)``, ``W(...)``, ``+`` and parentheses, as functions."""

    def __init__(self, text: str, env: dict):
        self.s, self.i, self.env = text, 0, env

    def expr(self):
        out = self.term()
        while self.i < len(self.s) and self.s[self.i] == "+":
            self.i += 1
            out = out + self.term()
        return out

    def term(self):
        if self.i >= len(self.s):
            raise ValueError("unexpected end")
        c = self.s[self.i]
        if c == "X":
            self.i += 1
            return self.env["X"]
        if c == "(":
            self.i += 1
            out = self.expr()
            self._close()
            return out
        if c in "NAW" and self.s[self.i + 1: self.i + 2] == "(":
            self.i += 2
            out = self.env[c](self.expr())
            self._close()
            return out
        raise ValueError(f"unexpected {c!r}")

    def _close(self):
        if self.s[self.i: self.i + 1] != ")":
            raise ValueError("unbalanced")
        self.i += 1


def evaluate(canon: str, env: dict) -> np.ndarray:
    """The value of a canonical formula (``"X+A(N(X))"``) with ``env``'s ``X``, ``N``, ``A``, ``W``.

    Raises:
        ValueError: not a well-formed canonical formula (unbalanced, a stray name, empty).
    """
    p = _Parser(canon, env)
    out = p.expr()
    if p.i != len(canon):
        raise ValueError("trailing text")
    return out


def classify(canon: str, sublayer: str = "attention") -> str | None:
    """The known wiring that ``canon`` computes, or None.

    Args:
        canon: :func:`normref.answers.parse_formula`'s output for a question about
            ``sublayer``: ``A`` the asked sublayer, ``W`` the other.
        sublayer: ``"attention"`` or ``"ffn"``; the block runs attention first either way.

    Returns:
        A key of :data:`ONE_SUBLAYER` (the asked sublayer only; ``"pre_ln"`` is the answer), of
        :data:`TWO_SUBLAYERS` (both sublayers), ``"two_sublayers"`` for another formula with
        both, or None (a formula of one sublayer that is none of these, or not well formed).
    """
    X, attn, ffn, norm = _setting()
    asked, other = (attn, ffn) if sublayer == "attention" else (ffn, attn)
    try:
        got = evaluate(canon, {"X": X, "N": norm, "A": asked, "W": other})
    except (ValueError, IndexError):
        return None
    if np.shape(got) != X.shape:
        return None
    if "A" in canon and "W" in canon:
        for name, form in TWO_SUBLAYERS.items():
            if np.allclose(got, form(X, attn, ffn, norm), atol=1e-9):
                return name
        return "two_sublayers"
    if "W" in canon:
        return None
    for name, form in ONE_SUBLAYER.items():
        if np.allclose(got, form(X, asked, norm), atol=1e-9):
            return name
    return None
