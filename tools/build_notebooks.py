"""Write the lesson notebooks in ``notebooks/`` from the cell text below (no outputs).

This file is the source of the lesson notebooks: edit the text here, then run

    .venv/bin/python tools/build_notebooks.py

and commit both. ``tests/test_notebooks.py`` fails if a committed notebook differs from what
this script builds, so the two cannot drift apart. Cell ids are fixed (``<notebook>-<n>``) so a
rebuild changes nothing that was not edited. Notebooks are thin: narrative, formulas and short
cells that call ``normref`` (the plots, widgets, measurements and self-checks live there and are
tested there).
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "notebooks"

IMPORTS = """\
import torch
import normref
from normref import experiments, plots, practice, widgets"""


def md(text: str) -> tuple[str, str]:
    return ("markdown", text.strip("\n"))


def code(text: str) -> tuple[str, str]:
    return ("code", text.strip("\n"))


# --------------------------------------------------------------------------- 00_start

START = [
    md(r"""
# Lesson 16 · Normalize across features, one token at a time

**Your win:** calculate a normalized token vector and distinguish **LayerNorm**, **RMSNorm**,
**Pre-LN** and **Post-LN**.

About 14 minutes of reading, then practice. **Needs:** the mean and the square root (warm-up
below). **Outcome:** calculate $\operatorname{Norm}(\mathbf x)$.

*Mission link:* the transformer block we build is **pre-norm**: it normalizes the current hidden
state before attention and before the feed-forward sublayer.

## Course map

| step | notebook | what you do there |
|---|---|---|
| 0 | `00_start.ipynb` | this page: the map, the warm-up, how to check yourself and hand in |
| 1 | [`01_layernorm.ipynb`](01_layernorm.ipynb) | LayerNorm: statistics across the $d$ features of **one** token; the worked example $(1,2,3)$; an explorer with sliders; a $[B,T,D]$ batch; what LayerNorm is invariant to |
| 2 | [`02_rmsnorm.ipynb`](02_rmsnorm.ipynb) | RMSNorm: scale without centering; MiniMind's module; why statistics are computed in float32; what it costs; the Retrieval check |
| 3 | [`03_placement.ipynb`](03_placement.ipynb) | Pre-LN vs Post-LN: where the norm sits; residual stream and gradients per layer; why Post-LN needs warmup; the Practice studio |

The graded assignments are in `release/` (open them from the file browser on the left):
"""),
    code(r"""
from pathlib import Path

for nb in sorted(Path("../release").glob("*/*.ipynb")):
    print(f"release/{nb.parent.name}/{nb.name}")
"""),
    md(r"""
## Warm-up: mean and square root

For a token $\mathbf x=(1,2,3)$ with $d=3$ features:

$$\mu=\frac1d\sum_{r=1}^d x_r=\frac{1+2+3}{3}=2,\qquad
\sigma^2=\frac1d\sum_{r=1}^d(x_r-\mu)^2=\frac{1+0+1}{3}=\frac23,\qquad \sigma=\sqrt{2/3}.$$

Work them out by hand first, then run the cell:
"""),
    code(r"""
import math
import torch
import normref

x = torch.tensor([1.0, 2.0, 3.0])
mu = x.mean()
var = ((x - mu) ** 2).mean()  # divide by d = 3, not by d - 1
print(f"mean = {mu.item():.3f}   variance = {var.item():.4f} (2/3 = {2 / 3:.4f})   std = {math.sqrt(var):.3f}")
print(f"mean of the squares = {(x ** 2).mean().item():.4f} (14/3),   its root = {math.sqrt(14 / 3):.3f}")
"""),
    md(r"""
Those are the two statistics of the lesson. LayerNorm divides $\mathbf x-\mu$ by $\sigma$;
RMSNorm divides $\mathbf x$ by the root of the mean of the squares. `normref` computes both:
"""),
    code(r"""
print("LayerNorm(1, 2, 3) ~", [round(v, 3) for v in normref.layer_norm(x, eps=0.0).tolist()])  # (-1, 0, 1) / sqrt(2/3)
print("RMSNorm(1, 2, 3)   ~", [round(v, 3) for v in normref.rms_norm(x, eps=0.0).tolist()])    # (1, 2, 3) / sqrt(14/3)
"""),
    md(r"""
## Check yourself at any time

Every function you write in this course can be checked against the reference. A checker runs
a battery of cases (the seed's examples, float16, bfloat16, $B=T=D$, tiny values, constant
rows) and says what is wrong and the likely cause. Here is a typical slip, the unbiased
variance, and what the checker says about it:
"""),
    code(r"""
def my_layer_norm(x, weight, bias, eps=1e-5):
    # x: [..., D] numpy array; weight, bias: [D]. Deliberately wrong: ddof=1 divides by d - 1.
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, ddof=1, keepdims=True)
    return (x - mean) / (var + eps) ** 0.5 * weight + bias

normref.check_layer_norm(my_layer_norm, quick=True)
"""),
    md(r"""
Change `ddof=1` to `ddof=0` and run it again: *all correct*. The same works for
`normref.check_rms_norm(fn)` (and `quick=True` runs only the seed's two cases).

## Validate and hand in an assignment

1. Open an assignment from `release/`, fill in every `YOUR CODE HERE`, and run the test cell
   under each answer: it tells you what is wrong, for example *"your output equals the
   reference times 0.935 = sqrt(7/8): did you divide by n-1?"*.
2. Before you hand in, validate: press the Validate button in the notebook's toolbar
   (nbgrader's JupyterLab extension), or run `python -m nbgrader validate release/rmsnorm/rmsnorm.ipynb`
   from the course folder (`.venv/bin/python` in a local clone). It re-runs the notebook in a
   fresh kernel and lists any cell that fails.
3. **Hand in** the saved `.ipynb` the way your course says: the **Assignment List** tab's
   *Submit* button when your instructor runs an nbgrader exchange, or upload the file to your
   course's LMS. Your instructor grades it with `make grade` (nbgrader `autograde`), and you get
   a feedback page per assignment.

## Sources and links

- Ba, Kiros and Hinton 2016, [*Layer Normalization*](https://arxiv.org/abs/1607.06450)
- Zhang and Sennrich 2019, [*Root Mean Square Layer Normalization*](https://arxiv.org/abs/1910.07467)
- Xiong et al. 2020, [*On Layer Normalization in the Transformer Architecture*](https://arxiv.org/abs/2002.04745)
- MiniMind's model code (the `RMSNorm` module and block used in the lesson): <https://github.com/jingyaogong/minimind>

Next: [01 · LayerNorm](01_layernorm.ipynb).
"""),
]

# --------------------------------------------------------------------------- 01_layernorm

LAYERNORM = [
    md(r"""
# 01 · LayerNorm: statistics across the features of one token

A hidden state in a transformer is a tensor of shape $[B, T, D]$: $B$ sequences, $T$ tokens
each, $D$ features per token. **LayerNorm looks at one token at a time.** For one token vector
$\mathbf x\in\mathbb R^d$ it computes two statistics across its $d$ features:

$$\mu=\frac1d\sum_{r=1}^d x_r,\qquad \sigma^2=\frac1d\sum_{r=1}^d(x_r-\mu)^2,\qquad
\operatorname{LN}(\mathbf x)=\gamma\odot\frac{\mathbf x-\mu}{\sqrt{\sigma^2+\varepsilon}}+\beta .$$

$\gamma$ (`weight`) and $\beta$ (`bias`) are learned vectors of length $d$; $\varepsilon$
(`eps`, $10^{-5}$ in PyTorch) keeps the division finite when a token is constant.
"""),
    code(IMPORTS),
    md(r"""
## The worked example, step by step: $\mathbf x=(1,2,3)$

$$\mu=2,\qquad \sigma^2=\frac{(1-2)^2+(2-2)^2+(3-2)^2}{3}=\frac23 .$$

Ignoring the tiny $\varepsilon$ and taking $\gamma=1,\ \beta=0$:

$$\operatorname{LN}(1,2,3)=\frac{(-1,0,1)}{\sqrt{2/3}}\approx(-1.225,\ 0,\ 1.225).$$
"""),
    code(r"""
x = torch.tensor([1.0, 2.0, 3.0])
mu = x.mean()                      # 2
centered = x - mu                  # (-1, 0, 1)
var = (centered ** 2).mean()       # 2/3: divide by d, not d - 1
y = centered / torch.sqrt(var)     # eps ignored, gamma = 1, beta = 0
print(f"mu = {mu:.3f}   sigma^2 = {var:.3f} (2/3)   sqrt(sigma^2) = {var.sqrt():.3f}")
print("by hand            LN(1, 2, 3) ~", [round(v, 3) for v in y.tolist()])
print("normref.layer_norm LN(1, 2, 3) ~", [round(v, 3) for v in normref.layer_norm(x, eps=0.0).tolist()])
"""),
    md(r"""
The output has mean 0 and (biased) standard deviation 1, whatever the input's mean and
spread were.

## Explore: drag the features, $\gamma$, $\beta$ and $\varepsilon$

Orange hatched bars are the input $\mathbf x$, blue bars the output; the dashed line and the
orange band mark the input's mean and mean ± std, the solid line and blue band the output's.
The numbers are printed under the chart. Try:

- drag `x[2]` to 5: the input's spread grows, the output's std stays 1;
- add the same amount to every feature: the output does not move (LayerNorm removes the mean);
- set `gamma` to 2 and `beta` to 0.5: the output's std becomes 2 and its mean 0.5;
- push `eps` towards 10: it now dominates $\sigma^2$ and shrinks the output toward $\beta$.
"""),
    code(r"""
widgets.NormExplorer()
"""),
    md(r"""
## A whole batch: each token is normalised on its own

Below is a $[B, T, D] = [2, 3, 8]$ batch whose six tokens have different means and spreads.
LayerNorm reduces over the last axis only (`dim=-1`), so each row of the heat map is
normalised using its own 8 numbers, the $B$ and $T$ axes are never mixed, and the output has
the same shape $[2, 3, 8]$.
"""),
    code(r"""
batch = plots.demo_batch()                      # [2, 3, 8], float64
print("input shape :", list(batch.shape))
print("output shape:", list(normref.layer_norm(batch).shape))
plots.plot_batch_before_after(batch)
"""),
    md(r"""
## What LayerNorm is invariant to (Ba et al. 2016, Table 1), measured

Ba, Kiros and Hinton compare normalisation methods by which transformations leave their output
unchanged. The table below is not typed in: `experiments.invariance_table()` applies each
transformation to a small linear layer $\mathbf a = W\mathbf x$ followed by the norm, and ticks
the cell when the output did not change (float64, $\varepsilon=0$). RMSNorm, the next
notebook's subject, is measured beside LayerNorm.
"""),
    code(r"""
experiments.invariance_table()
"""),
    md(r"""
Read the two rows that differ: **re-centering** (adding the same number to every feature of a
token, or the same vector to every row of $W$) leaves LayerNorm unchanged, because it
subtracts the mean; RMSNorm does not subtract the mean, so its output moves. Re-scaling a
token or a whole weight matrix leaves both unchanged: both divide by a statistic that scales
with the input.

## Your turn: implement LayerNorm

Write `my_layer_norm` for numpy arrays `[..., D]` (reduce over the last axis, keep it for
broadcasting, divide by $d$) and run the cell: the checker tells you what is wrong.
"""),
    code(r"""
def my_layer_norm(x, weight, bias, eps=1e-5):
    # x: [..., D] numpy array; weight, bias: [D]; return the same shape as x
    raise NotImplementedError("replace this line with your code")

normref.check_layer_norm(my_layer_norm, quick=True)
"""),
    md(r"""
Next: [02 · RMSNorm](02_rmsnorm.ipynb), scale without centering.
"""),
]

# --------------------------------------------------------------------------- 02_rmsnorm

RMSNORM = [
    md(r"""
# 02 · RMSNorm: scale without centering

RMSNorm drops LayerNorm's mean subtraction and its $\beta$. It divides the token by its root
mean square:

$$\operatorname{RMS}(\mathbf x)=\sqrt{\frac1d\sum_{r=1}^d x_r^2+\varepsilon},\qquad
\operatorname{RMSNorm}(\mathbf x)=\gamma\odot\frac{\mathbf x}{\operatorname{RMS}(\mathbf x)} .$$

For $(1,2,3)$: $\operatorname{RMS}=\sqrt{14/3}\approx 2.160$, so the unscaled output is
approximately $(0.463,\ 0.926,\ 1.389)$. **Unlike LayerNorm, its mean is not forced to zero.**
"""),
    code(IMPORTS),
    code(r"""
x = torch.tensor([1.0, 2.0, 3.0])
rms = x.pow(2).mean().sqrt()                  # sqrt(14/3)
y = normref.rms_norm(x, eps=0.0)
print(f"RMS(1, 2, 3) = sqrt(14/3) ~ {rms:.3f}")
print("RMSNorm(1, 2, 3) ~", [round(v, 3) for v in y.tolist()], f"  mean {y.mean():.3f} (LayerNorm's would be 0)")
"""),
    md(r"""
## LayerNorm or RMSNorm: flip the switch

The same explorer, with a `norm` switch. Set `x = (1, 2, 3)` and flip between the two:
LayerNorm centres the output on 0, RMSNorm keeps it on the same side as the input (mean
0.926) and only fixes its RMS to 1. Then add 3 to every feature: LayerNorm's output does not
move, RMSNorm's does. (`beta` is greyed out for RMSNorm: it has none.)
"""),
    code(r"""
widgets.NormExplorer(toggle=True)
"""),
    md(r"""
RMSNorm rescales each token across its feature axis. The batch and sequence axes stay
separate, and the output keeps the same $[B,T,D]$ shape:
"""),
    code(r"""
plots.plot_batch_before_after(plots.demo_batch(), norm="rms")
"""),
    md(r"""
## Code checkpoint · RMSNorm over the last axis

MiniMind uses RMSNorm. Notice that `mean(dim=-1)` reduces only the feature axis,
independently for every batch item and token. The seed's module, verbatim:
"""),
    code(r"""
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        rms = torch.rsqrt(
            x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps
        )
        return (x.float() * rms * self.weight).to(dtype=x.dtype)
"""),
    md(r"""
**Trace it.** For `x.shape == [2, 3, 8]`, what is the shape of `rms` after `keepdim=True`?
Answer in the box (the answer appears only after you try):
"""),
    code(r"""
practice.quiz("trace_rms_shape")
"""),
    md(r"""
The module computes exactly what `normref.rms_norm` computes, bit for bit, and keeps the
shape:
"""),
    code(r"""
torch.manual_seed(0)
h = torch.randn(2, 3, 8)
out = RMSNorm(8)(h)
print("shape:", list(h.shape), "->", list(out.shape))
print("identical to normref.rms_norm:", torch.equal(out, normref.rms_norm(h, torch.ones(8), eps=1e-6)))
"""),
    md(r"""
## Engineering bridge · two norms, one block width

The full MiniMind block owns an `input_layernorm` before attention and a
`post_attention_layernorm` before the feed-forward route:

```python
residual = hidden_states
hidden_states, present = self.self_attn(
    self.input_layernorm(hidden_states), position_embeddings,
    past_key_value, use_cache, attention_mask
)
hidden_states = hidden_states + residual
hidden_states = hidden_states + self.mlp(
    self.post_attention_layernorm(hidden_states)
)
```

*Shape check:* each norm maps $[B, T, D]\to[B, T, D]$; the two residual additions therefore
remain elementwise valid.

Both norms **compute their statistics in float32, then cast the normalized result back** to
the incoming dtype. Why? float16's largest finite number is 65504, so any feature with
$|x|\ge 256$ overflows when squared. Here is a float16 token $(300, -300, 300, -300)$ normalised
both ways:
"""),
    code(r"""
demo = experiments.float16_overflow_demo()
print(f"float16 max = {demo['fp16_max']:.0f};  300**2 = 90000")
print("statistics in float16:  x**2 =", demo["x_sq_fp16"].tolist(), " mean =", demo["mean_sq_fp16"].item(),
      " ->  output", demo["y_fp16_stats"].tolist(), "(collapsed to zero)")
print("statistics in float32:  x**2 =", demo["x_sq_fp32"].tolist(), " mean =", demo["mean_sq_fp32"].item(),
      " ->  output", demo["y_fp32_stats"].tolist(), demo["y_fp32_stats"].dtype)
"""),
    md(r"""
$\operatorname{rsqrt}(\infty)=0$, so the float16-statistics output is all zeros: the token is
erased. `x.float()` first, then `.to(x.dtype)` at the end, gives $(1,-1,1,-1)$ back in float16.

### What it costs

RMSNorm skips the mean and the subtraction, so it does less work. How much less depends on the
kernel. Measured now, on the machine running this notebook (fastest of 15 rounds; the numbers
move a little from run to run on a busy machine):
"""),
    code(r"""
timing = experiments.time_norms()
for row in timing["rows"]:
    print(f"{row['impl']:<28}  LayerNorm {row['layer_us']:7.1f} us   RMSNorm {row['rms_us']:7.1f} us")
print()
print(experiments.RMSNORM_PAPER_CLAIM)
plots.plot_timing(timing)
"""),
    md(r"""
Written in the same plain torch operations, RMSNorm is the cheaper one, as Zhang and Sennrich
report. PyTorch's CPU `F.layer_norm`, however, is one fused kernel, while its `F.rms_norm` is
built from several operations, so there the saving can vanish or reverse: a kernel can matter
more than the maths.

## Retrieval check

Answer once before reopening the code; use the feedback to correct your explanation.
"""),
    code(r"""
practice.quiz("retrieval_axis")
"""),
    md(r"""
LayerNorm vs RMSNorm asks **what computation?** The next notebook asks **where is it placed?**
Next: [03 · Pre-LN vs Post-LN](03_placement.ipynb).
"""),
]

# --------------------------------------------------------------------------- 03_placement

PLACEMENT = [
    md(r"""
# 03 · Pre-LN vs Post-LN: where the norm sits

Placement is a separate choice from the norm. A transformer block has two residual
sublayers, attention and the feed-forward net; call either one $F$. The norm can sit before
$F$ or after the residual addition:

| Pre-LN, as depicted in our block | Original Post-LN (Vaswani et al. 2017) |
|---|---|
| $Y=X+F(\operatorname{Norm}(X))$ | $Y=\operatorname{Norm}(X+F(X))$ |
| normalize **before** the sublayer | normalize **after** the residual addition |

LayerNorm vs RMSNorm asks **what computation?** Pre-LN vs Post-LN asks **where is it placed?**
"""),
    code(IMPORTS + r"""
import inspect
"""),
    code(r"""
torch.manual_seed(0)
X = torch.randn(2, 3, 8)                       # [B, T, D]
F = torch.nn.Linear(8, 8)                      # a stand-in sublayer
norm = normref.LayerNorm(8)
Y_pre = normref.pre_ln(X, F, norm)             # X + F(Norm(X))
Y_post = normref.post_ln(X, F, norm)           # Norm(X + F(X))
print("Pre-LN  Y = X + F(Norm(X)):", list(X.shape), "->", list(Y_pre.shape))
print("Post-LN Y = Norm(X + F(X)):", list(X.shape), "->", list(Y_post.shape))
print(f"std of each token after Post-LN: {Y_post.std(-1, unbiased=False).min():.3f} to {Y_post.std(-1, unbiased=False).max():.3f}"
      "  (the residual stream itself is normalised)")
print(f"std of each token after Pre-LN:  {Y_pre.std(-1, unbiased=False).min():.3f} to {Y_pre.std(-1, unbiased=False).max():.3f}"
      "  (only F's input was normalised)")
"""),
    md(r"""
In `normref.TransformerBlock` the two placements differ visibly, line by line (nanoGPT
style, MiniMind's names):
"""),
    code(r"""
print(inspect.getsource(normref.TransformerBlock.forward))
"""),
    md(r"""
Because a Pre-LN block never normalises the residual stream itself, a Pre-LN stack ends with
one more norm before the output head (GPT-2's `ln_f`, MiniMind's final `norm`);
`normref.TransformerStack` adds it.

## Explore: placement and depth

Switch the placement, the depth and the norm of a freshly initialised
`normref.TransformerStack`. Left: how large the residual stream is after each layer. Right: the
gradient that each layer's second feed-forward matrix $W_2$ receives at the very first training
step (one batch, log scale). The other placement is drawn in grey.
"""),
    code(r"""
widgets.PlacementExplorer()
"""),
    md(r"""
## (a) The residual stream, layer by layer

Mean over three seeds of an 8-layer stack (LayerNorm, $d=32$): Pre-LN adds every sublayer's
output to an un-normalised stream, so the stream grows with depth (Xiong et al., Lemma 2);
Post-LN normalises it after every sublayer, so every token leaves each layer with norm
$\sqrt d=\sqrt{32}\approx5.66$.
"""),
    code(r"""
profiles = experiments.placement_profiles(depth=8)
plots.plot_residual_norms(profiles["residual"])
"""),
    md(r"""
## (b) Gradients at initialisation

Xiong et al. (2020) prove (Theorem 1) that at initialisation the gradient of the **last**
layer's parameters does not shrink with the depth $L$ in a Post-LN transformer, while in a
Pre-LN one it shrinks like $1/\sqrt L$. Post-LN's output layers therefore start with large
gradients, and a large learning rate at the first steps destabilises them: that is their
explanation of why Post-LN needs **learning-rate warmup**. Their Fig. 3 shows the Post-LN
gradient norm rising toward the output layers and the Pre-LN one flat.

Below, measured on `normref.TransformerStack` (mean over seeds): left, each layer of an
8-layer stack; right, the last layer as the stack gets deeper.
"""),
    code(r"""
sweep = experiments.last_layer_grad_vs_depth(depths=(1, 2, 4, 8, 16))
grads = plots.plot_grad_norms(profiles["grad"], sweep)
grads
"""),
    md(r"""
**Reading it honestly.** The right panel reproduces Theorem 1: Pre-LN's last-layer gradient
falls with depth (close to the dotted $1/\sqrt L$ line), Post-LN's stays where it is, so the
deeper the stack the more gradient Post-LN's output side gets *compared with Pre-LN's*. The left
panel agrees on that comparison (Post-LN's last/first ratio is well above Pre-LN's, and its
output layers get about twice Pre-LN's gradient), but not on the shape of Fig. 3: in this small
decoder-only stack with a gated (SwiGLU) feed-forward net, Post-LN's per-layer profile is
roughly flat rather than rising, and Pre-LN's falls toward the output rather than staying flat.
Xiong et al. measured a 6-layer encoder-decoder with ReLU feed-forward nets; per-layer profiles
depend on such details, the depth trend of Theorem 1 much less.

## (c) A tiny training run: who needs warmup?

A 6-layer language model (LayerNorm, $d=32$) learns a Markov chain in which every token has
two equally likely successors, so the best possible loss is $\ln 2\approx0.693$ nats. Adam at
one fixed learning rate, the same seed and batches for all four runs; with warmup the rate
rises linearly from almost 0 over the first steps. It runs now, on this machine's CPU, in
a few seconds.
"""),
    code(r"""
curves = experiments.train_placements()
print(f"Adam, lr {curves['lr']}, {curves['steps']} steps; warmup: linear over the first {curves['warmup']} steps")
plots.plot_training(curves)
"""),
    md(r"""
Pre-LN trains at this learning rate from the first step. Post-LN, with the same rate, falls
apart early and never recovers; ramping the rate up first lets it train. Theorem 1 predicts
that Post-LN's trouble grows with depth: try `plots.plot_training(experiments.train_placements(depth=2))`
and `depth=10` and compare.

## Practice studio · recall → build → verify

Answer each one in its box and press **Check**: the feedback names the likely mistake. **Show
answer** unlocks after your first attempt. You can also answer in code, for example
`practice.check("ps_rms_3_4", 3.536)`.
"""),
    code(r"""
practice.quiz("ps_mean_var")
"""),
    code(r"""
practice.quiz("ps_layernorm")
"""),
    code(r"""
practice.quiz("ps_rms_3_4")
"""),
    code(r"""
practice.quiz("ps_rms_subtracts_mean")
"""),
    code(r"""
practice.quiz("ps_pre_ln_formula")
"""),
    code(r"""
practice.quiz("ps_shape_change")
"""),
    md(r"""
## Build challenge · implement RMSNorm

Write an RMSNorm forward pass that reduces only the last axis, keeps dimensions for
broadcasting, computes the statistic in float32, then returns the input dtype; verify
`[2, 3, 8] → [2, 3, 8]`. This is the graded assignment `release/rmsnorm/rmsnorm.ipynb`: its
test cells tell you what is wrong, and the standard answer is released with the feedback.

*Primary sources:* Ba et al. 2016, [Layer Normalization](https://arxiv.org/abs/1607.06450);
Zhang and Sennrich 2019, [RMSNorm](https://arxiv.org/abs/1910.07467); Xiong et al. 2020,
[On Layer Normalization in the Transformer Architecture](https://arxiv.org/abs/2002.04745).
"""),
]

NOTEBOOKS = {
    "00_start.ipynb": START,
    "01_layernorm.ipynb": LAYERNORM,
    "02_rmsnorm.ipynb": RMSNORM,
    "03_placement.ipynb": PLACEMENT,
}


def build(name: str) -> nbformat.NotebookNode:
    """The notebook ``name`` as nbformat 4.5, no outputs, fixed cell ids."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    stem = name.split(".")[0]
    for i, (kind, text) in enumerate(NOTEBOOKS[name]):
        cell = nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
        cell.id = f"{stem}-{i:02d}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def main(argv: list[str]) -> int:
    names = argv or list(NOTEBOOKS)
    for name in names:
        path = OUT / name
        nbformat.write(build(name), path)
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
