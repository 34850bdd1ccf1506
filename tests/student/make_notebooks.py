"""A new student's answers, written into copies of release/<a>/<a>.ipynb (nbformat).

Three students: `stu_ok` (correct answers in an unusual style), `stu_w1` and `stu_w2` (one or two
realistic mistakes from the lessons' text per assignment). Writes
OUT/<student>/<assignment>/<assignment>.ipynb (plus any helper file the release folder holds).
Not the grader's answer bank: written by hand for the student pass (tests/student/PASS.md).

Usage: python tests/student/make_notebooks.py OUT
"""
import shutil
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- rmsnorm
RMS_OK = '''def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last axis of x ([..., D]) with weight [D]; returns x's shape and dtype."""
    h = x.float()
    ms = torch.einsum("...d,...d->...", h, h).unsqueeze(-1) / h.shape[-1]
    return (h * (ms + eps).rsqrt() * weight.float()).to(x.dtype)
'''
RMS_NO_EPS = '''def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last axis of x ([..., D]) with weight [D]; returns x's shape and dtype."""
    h = x.float()
    rms = h.pow(2).mean(-1, keepdim=True).sqrt()   # forgot eps
    return (weight * (h / rms)).to(x.dtype)
'''
RMS_F16 = '''def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last axis of x ([..., D]) with weight [D]; returns x's shape and dtype."""
    rms = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)   # statistic in x's own dtype
    return (weight * (x / rms)).to(x.dtype)
'''

# ---------------------------------------------------------------- layernorm
LN_OK = '''def layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm over the last axis of x ([..., D]) with weight and bias [D]; numpy in,
    numpy out, with x's shape and dtype."""
    a = np.asarray(x, dtype=np.float32)
    d = a.shape[-1]
    centred = a - a.sum(axis=-1, keepdims=True) / d
    spread = np.einsum("...d,...d->...", centred, centred)[..., None] / d
    return (centred / np.sqrt(spread + eps) * weight + bias).astype(x.dtype)
'''
LN_UNBIASED = '''def layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm over the last axis of x ([..., D]) with weight and bias [D]; numpy in,
    numpy out, with x's shape and dtype."""
    a = x.astype(np.float32)
    mu = a.mean(axis=-1, keepdims=True)
    var = a.var(axis=-1, keepdims=True, ddof=1)   # unbiased, d - 1
    return ((a - mu) / np.sqrt(var + eps) * weight + bias).astype(x.dtype)
'''
LN_AXIS0 = '''def layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm over the last axis of x ([..., D]) with weight and bias [D]; numpy in,
    numpy out, with x's shape and dtype."""
    a = x.astype(np.float32)
    mu = a.mean(axis=0, keepdims=True)            # wrong axis: the batch axis
    var = a.var(axis=0, keepdims=True)
    return ((a - mu) / np.sqrt(var + eps) * weight + bias).astype(x.dtype)
'''

# ---------------------------------------------------------------- block
BLOCK_RMS_OK = '''class RMSNorm(nn.Module):
    """MiniMind's RMSNorm over the last axis: [..., dim] -> [..., dim], in x's dtype."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.register_parameter("weight", nn.Parameter(torch.ones(dim)))

    def forward(self, x):
        h = x.float()
        inv = h.square().mean(dim=-1, keepdim=True).add(self.eps).rsqrt()
        return torch.mul(h * inv, self.weight).type_as(x)
'''
BLOCK_RMS_WEIGHT_AFTER = '''class RMSNorm(nn.Module):
    """MiniMind's RMSNorm over the last axis: [..., dim] -> [..., dim], in x's dtype."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        h = x.float()
        normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.type_as(x)   # cast back, then the float32 weight
'''
BLOCK_RMS_F16 = '''class RMSNorm(nn.Module):
    """MiniMind's RMSNorm over the last axis: [..., dim] -> [..., dim], in x's dtype."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # statistic in x's own dtype (no x.float())
        return (self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
'''
PRE_OK = '''def pre_ln(x, sublayer, norm):
    """Pre-LN residual sublayer, Y = X + F(Norm(X)): x [B, T, D] -> [B, T, D]."""
    return sublayer(norm(x)).add(x)
'''
PRE_AS_POST = '''def pre_ln(x, sublayer, norm):
    """Pre-LN residual sublayer, Y = X + F(Norm(X)): x [B, T, D] -> [B, T, D]."""
    return norm(x + sublayer(x))
'''
POST_OK = '''def post_ln(x, sublayer, norm):
    """Post-LN residual sublayer, Y = Norm(X + F(X)): x [B, T, D] -> [B, T, D]."""
    return norm(torch.add(x, sublayer(x)))
'''
BLOCK_OK = '''class PreNormBlock(nn.Module):
    """One pre-norm transformer block with its two norms: [B, T, D] -> [B, T, D]."""

    def __init__(self, dim, n_heads):
        super().__init__()
        self.input_layernorm = RMSNorm(dim)
        self.self_attn = CausalSelfAttention(dim, n_heads)
        self.post_attention_layernorm = RMSNorm(dim)
        self.mlp = FeedForward(dim)

    def forward(self, x):
        pairs = ((self.input_layernorm, self.self_attn), (self.post_attention_layernorm, self.mlp))
        for norm, f in pairs:
            x = x + f(norm(x))
        return x
'''
BLOCK_SHARED = '''class PreNormBlock(nn.Module):
    """One pre-norm transformer block with its two norms: [B, T, D] -> [B, T, D]."""

    def __init__(self, dim, n_heads):
        super().__init__()
        self.input_layernorm = RMSNorm(dim)
        self.post_attention_layernorm = self.input_layernorm   # one norm shared by both
        self.self_attn = CausalSelfAttention(dim, n_heads)
        self.mlp = FeedForward(dim)

    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))
'''
WARMUP_TEXT = ('**Using the two plots, explain why the original Post-LN transformer needs '
               'learning-rate warmup while Pre-LN trains without it** (3-5 sentences; graded by '
               'hand, 2 points):\n\nAt initialisation the Post-LN stack has large gradients for '
               'the last layers, while Pre-LN\'s gradient norms are flat across depth. A large '
               'learning rate right away therefore makes Post-LN diverge; warmup keeps the first '
               'steps small until the gradients settle. Pre-LN keeps an identity path through the '
               'residual stream and trains with or without warmup.')

# ---------------------------------------------------------------- modern
PERI_OK = '''def peri_ln(x, sublayer, norm, out_norm):
    """Peri-LN residual sublayer, Y = X + out_norm(F(norm(X))): x [B, T, D] -> [B, T, D]."""
    branch = norm(x)
    branch = sublayer(branch)
    branch = out_norm(branch)
    return torch.add(x, branch)
'''
PERI_STREAM = '''def peri_ln(x, sublayer, norm, out_norm):
    """Peri-LN residual sublayer, Y = X + out_norm(F(norm(X))): x [B, T, D] -> [B, T, D]."""
    return out_norm(x + sublayer(norm(x)))   # normalises the residual stream too
'''
QK_OK = '''def qk_norm_logits(q, k, q_norm, k_norm):
    """QK-norm attention logits, q_norm(q) k_norm(k)^T / sqrt(d): [B, T, d] twice -> [B, T, T]."""
    qn, kn = q_norm(q).float(), k_norm(k).float()
    return (torch.einsum("bid,bjd->bij", qn, kn) / math.sqrt(q.shape[-1])).to(q.dtype)
'''
QK_AFTER = '''def qk_norm_logits(q, k, q_norm, k_norm):
    """QK-norm attention logits, q_norm(q) k_norm(k)^T / sqrt(d): [B, T, d] twice -> [B, T, T]."""
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return q_norm(logits)          # norm after the dot product
'''
QK_NOSCALE = '''def qk_norm_logits(q, k, q_norm, k_norm):
    """QK-norm attention logits, q_norm(q) k_norm(k)^T / sqrt(d): [B, T, d] twice -> [B, T, T]."""
    return q_norm(q) @ k_norm(k).transpose(-2, -1)   # forgot / sqrt(d)
'''
DYT_OK = '''def dyt(x, alpha, weight, bias):
    """Dynamic Tanh, weight * tanh(alpha * x) + bias: x [B, T, D] -> [B, T, D], in x's dtype."""
    return torch.addcmul(bias, weight, torch.tanh(alpha * x.float())).to(x.dtype)
'''
DYT_NO_WEIGHT = '''def dyt(x, alpha, weight, bias):
    """Dynamic Tanh, weight * tanh(alpha * x) + bias: x [B, T, D] -> [B, T, D], in x's dtype."""
    return (torch.tanh(alpha * x.float()) + bias).to(x.dtype)   # forgot weight
'''
DYT_NO_CAST = '''def dyt(x, alpha, weight, bias):
    """Dynamic Tanh, weight * tanh(alpha * x) + bias: x [B, T, D] -> [B, T, D], in x's dtype."""
    return weight * torch.tanh(alpha * x) + bias   # never cast back to x's dtype
'''
BOUND_TEXT = ('**Using the plot, explain why Peri-LN\'s residual stream stays bounded during '
              'training while Pre-LN\'s grows** (3-5 sentences; graded by hand, 2 points):\n\n'
              'In Pre-LN each sublayer adds its raw output to the residual stream, so after '
              'training at a high learning rate the hidden-state RMS grows layer after layer. '
              'Peri-LN normalises every sublayer output before adding it, so each layer adds a '
              'vector of RMS about its gamma, and the stream grows slowly and stays bounded.')

# ---------------------------------------------------------------- batchnorm
BN_OK = '''def batch_norm(x, weight, bias, running_mean, running_var, mask=None, training=True,
               momentum=0.1, eps=1e-5):
    """BatchNorm over the real tokens of x [B, T, D] (mask [B, T]: True = real); returns
    (y [B, T, D] in x's dtype, 0 at padding, new_running_mean [D], new_running_var [D])."""
    h = x.float()
    real = torch.ones(h.shape[:2]) if mask is None else mask.float()
    w = real.unsqueeze(-1)                       # [B, T, 1]: 1 for a real token
    if training:
        n = w.sum()
        if n < 2:
            raise ValueError(f"BatchNorm needs at least two real tokens, got {int(n)}")
        mu = (h * w).sum(dim=(0, 1)) / n
        var = ((h - mu) ** 2 * w).sum(dim=(0, 1)) / n
        new_mean = torch.lerp(running_mean.float(), mu, momentum)
        new_var = torch.lerp(running_var.float(), var * n / (n - 1), momentum)
    else:
        mu, var = running_mean.float(), running_var.float()
        new_mean, new_var = running_mean, running_var
    y = ((h - mu) * torch.rsqrt(var + eps) * weight.float() + bias.float()) * w
    return y.to(x.dtype), new_mean, new_var
'''
BN_PAD_IN_STATS = '''def batch_norm(x, weight, bias, running_mean, running_var, mask=None, training=True,
               momentum=0.1, eps=1e-5):
    """BatchNorm over the real tokens of x [B, T, D] (mask [B, T]: True = real); returns
    (y [B, T, D] in x's dtype, 0 at padding, new_running_mean [D], new_running_var [D])."""
    h = x.float()
    flat = h.reshape(-1, h.shape[-1])            # every position, padding included
    if training:
        n = flat.shape[0]
        if n < 2:
            raise ValueError("need two tokens")
        mu = flat.mean(0)
        var = flat.var(0, unbiased=False)
        new_mean = (1 - momentum) * running_mean + momentum * mu
        new_var = (1 - momentum) * running_var + momentum * var * n / (n - 1)
    else:
        mu, var = running_mean.float(), running_var.float()
        new_mean, new_var = running_mean, running_var
    y = (h - mu) / torch.sqrt(var + eps) * weight + bias
    if mask is not None:
        y = y * mask.unsqueeze(-1)
    return y.to(x.dtype), new_mean, new_var
'''
BN_UNBIASED = '''def batch_norm(x, weight, bias, running_mean, running_var, mask=None, training=True,
               momentum=0.1, eps=1e-5):
    """BatchNorm over the real tokens of x [B, T, D] (mask [B, T]: True = real); returns
    (y [B, T, D] in x's dtype, 0 at padding, new_running_mean [D], new_running_var [D])."""
    h = x.float()
    m = torch.ones(h.shape[:2], dtype=torch.bool) if mask is None else mask
    if training:
        real = h[m]                                   # [N, D]
        if real.shape[0] < 2:
            raise ValueError("fewer than two real tokens")
        mu = real.mean(0)
        var = real.var(0)                             # unbiased, used for normalising too
        new_mean = (1 - momentum) * running_mean + momentum * mu
        new_var = (1 - momentum) * running_var + momentum * var
    else:
        mu, var = running_mean, running_var
        new_mean, new_var = running_mean, running_var
    y = (h - mu) / torch.sqrt(var + eps) * weight + bias
    y = torch.where(m.unsqueeze(-1), y, torch.zeros_like(y))
    return y.to(x.dtype), new_mean, new_var
'''

# grade_id of the answer cell -> source, per student and assignment
PLAN = {
    "stu_ok": {
        "rmsnorm": {"rms_norm_impl": RMS_OK},
        "layernorm": {"layer_norm_impl": LN_OK},
        "block": {"rms_module_impl": BLOCK_RMS_OK, "pre_ln_impl": PRE_OK, "post_ln_impl": POST_OK,
                  "block_impl": BLOCK_OK, "block_warmup_why": WARMUP_TEXT},
        "modern": {"peri_ln_impl": PERI_OK, "qk_logits_impl": QK_OK, "dyt_impl": DYT_OK,
                   "peri_bound_why": BOUND_TEXT},
        "batchnorm": {"batch_norm_impl": BN_OK},
    },
    "stu_w1": {
        "rmsnorm": {"rms_norm_impl": RMS_NO_EPS},
        "layernorm": {"layer_norm_impl": LN_UNBIASED},
        "block": {"rms_module_impl": BLOCK_RMS_WEIGHT_AFTER, "pre_ln_impl": PRE_AS_POST, "post_ln_impl": POST_OK,
                  "block_impl": BLOCK_OK, "block_warmup_why": WARMUP_TEXT},
        "modern": {"peri_ln_impl": PERI_OK, "qk_logits_impl": QK_AFTER, "dyt_impl": DYT_NO_WEIGHT,
                   "peri_bound_why": BOUND_TEXT},
        "batchnorm": {"batch_norm_impl": BN_PAD_IN_STATS},
    },
    "stu_w2": {
        "rmsnorm": {"rms_norm_impl": RMS_F16},
        "layernorm": {"layer_norm_impl": LN_AXIS0},
        "block": {"rms_module_impl": BLOCK_RMS_F16, "pre_ln_impl": PRE_OK, "post_ln_impl": POST_OK,
                  "block_impl": BLOCK_SHARED, "block_warmup_why": WARMUP_TEXT},
        "modern": {"peri_ln_impl": PERI_STREAM, "qk_logits_impl": QK_NOSCALE, "dyt_impl": DYT_NO_CAST,
                   "peri_bound_why": BOUND_TEXT},
        "batchnorm": {"batch_norm_impl": BN_UNBIASED},
    },
}


def main(out):
    out = Path(out)
    for student, assignments in PLAN.items():
        for a, answers in assignments.items():
            src = ROOT / "release" / a
            dst = out / student / a
            dst.mkdir(parents=True, exist_ok=True)
            for f in src.iterdir():
                if f.is_file() and f.suffix != ".ipynb":
                    shutil.copy(f, dst / f.name)
            nb = nbformat.read(src / f"{a}.ipynb", as_version=4)
            left = dict(answers)
            for cell in nb.cells:
                gid = cell.metadata.get("nbgrader", {}).get("grade_id")
                if gid in left:
                    cell.source = left.pop(gid).rstrip("\n")
            assert not left, f"{student}/{a}: no cell for {sorted(left)}"
            nbformat.write(nb, dst / f"{a}.ipynb")
    print("wrote", out)


if __name__ == "__main__":
    main(sys.argv[1])
