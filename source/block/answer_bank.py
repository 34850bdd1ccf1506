"""The ``block`` assignment's part of the answer bank (lesson 03: an RMSNorm module, Pre-LN and
Post-LN sublayers, MiniMind's Pre-LN block, the warm-up question): synthetic submissions and the
points each must get, merged into :mod:`grader.demo.answer_bank` (its docstring says how the
numbers are derived).
"""
from __future__ import annotations

__all__ = ["ANSWERS", "EXPECTED"]

_MODULE_HEAD = """class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
"""
_MODULE_CORRECT = _MODULE_HEAD + """\
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)  # [..., 1]
        return (x.float() * rms * self.weight).to(dtype=x.dtype)
"""
_BLOCK_HEAD = """class PreNormBlock(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.input_layernorm = RMSNorm(dim)
        self.self_attn = CausalSelfAttention(dim, n_heads)
        self.post_attention_layernorm = RMSNorm(dim)
        self.mlp = FeedForward(dim)

    def forward(self, x):
"""
_BLOCK_CORRECT = _BLOCK_HEAD + """\
        h = x + self.self_attn(self.input_layernorm(x))  # [B, T, D]
        return h + self.mlp(self.post_attention_layernorm(h))
"""
_WARMUP_WHY = ("At initialisation Post-LN's gradients stay large up to the last layers, several "
               "times Pre-LN's there, whose gradients fall toward the output. A full learning "
               "rate on those big gradients makes the first updates too large, so Post-LN "
               "without warmup plateaus at a worse loss; warmup keeps the early steps small. "
               "Pre-LN's residual path is an identity and only the branch is normalised, so its "
               "gradients are well scaled and it needs no warmup.")

_BLOCK_CORRECT_ANSWERS = {
    "rms_module_impl": _MODULE_CORRECT,
    "pre_ln_impl": "def pre_ln(x, sublayer, norm):\n    return x + sublayer(norm(x))",
    "post_ln_impl": "def post_ln(x, sublayer, norm):\n    return norm(x + sublayer(x))",
    "block_impl": _BLOCK_CORRECT,
    "block_warmup_why": _WARMUP_WHY,
}


def _block(**changes: str) -> dict[str, str]:
    return {**_BLOCK_CORRECT_ANSWERS, **changes}


def _pre(body: str) -> str:
    return f"def pre_ln(x, sublayer, norm):\n    return {body}"


def _post(body: str) -> str:
    return f"def post_ln(x, sublayer, norm):\n    return {body}"


def _forward(body: str) -> str:
    return _BLOCK_HEAD + body


_BLOCK_ANSWERS = {
    "correct": dict(_BLOCK_CORRECT_ANSWERS),
    "blank": {},
    "partial": {k: v for k, v in _BLOCK_CORRECT_ANSWERS.items()
                if k not in ("post_ln_impl", "block_warmup_why")},
    "low_precision_stats": _block(rms_module_impl=_MODULE_HEAD + """\
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # in x's dtype
        return (x * rms * self.weight).to(dtype=x.dtype)
"""),
    "wrong_dtype": _block(rms_module_impl=_MODULE_HEAD + """\
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x.float() * rms * self.weight  # stays float32
"""),
    "module_weight": _block(rms_module_impl=_MODULE_HEAD + """\
        self.eps = eps
        self.weight = torch.ones(dim)  # a plain tensor: not a parameter, never trained

    def forward(self, x):
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x.float() * rms * self.weight).to(dtype=x.dtype)
"""),
    "residual_from_normed": _block(
        pre_ln_impl=_pre("norm(x) + sublayer(norm(x))"),
        block_impl=_forward("""\
        h = self.input_layernorm(x)
        h = h + self.self_attn(h)
        h2 = self.post_attention_layernorm(h)
        return h2 + self.mlp(h2)
""")),
    "pre_post_swapped": _block(pre_ln_impl=_pre("norm(x + sublayer(x))"),
                               post_ln_impl=_post("x + sublayer(norm(x))")),
    "missing_residual": _block(
        pre_ln_impl=_pre("sublayer(norm(x))"),
        post_ln_impl=_post("norm(sublayer(x))"),
        block_impl=_forward("""\
        h = self.self_attn(self.input_layernorm(x))  # the residual x is not added
        return h + self.mlp(self.post_attention_layernorm(h))
""")),
    "norm_on_sublayer_output": _block(pre_ln_impl=_pre("x + norm(sublayer(x))"),
                                      post_ln_impl=_post("x + norm(sublayer(x))")),
    "missing_norm": _block(pre_ln_impl=_pre("x + sublayer(x)"),
                           post_ln_impl=_post("x + sublayer(x)")),
    "norms_swapped": _block(block_impl=_forward("""\
        h = x + self.self_attn(self.post_attention_layernorm(x))
        return h + self.mlp(self.input_layernorm(h))
""")),
    "shared_norm": _block(block_impl=_forward("""\
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.input_layernorm(h))  # the first norm again
""")),
    "mlp_reads_x": _block(block_impl=_forward("""\
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(x))  # reads x, not h
""")),
    "missing_attribute": _block(block_impl="""class PreNormBlock(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.ln_1 = RMSNorm(dim)  # nanoGPT's names, not MiniMind's
        self.attn = CausalSelfAttention(dim, n_heads)
        self.ln_2 = RMSNorm(dim)
        self.mlp = FeedForward(dim)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))
"""),
}

# Cases: RMSNorm module (7, 0.5 each in rms_module_battery): 0 the parameter; 1 float32
# [2, 3, 8], trained weight; 2 [4, 4, 4]; 3 the float16 overflow rows; 4 bfloat16 [2, 3, 8];
# 5 RMSNorm(5, eps=1e-4) on tiny values; 6 the default eps on tiny values.
# pre_ln / post_ln (4, 0.5 each): 0 the seed token (1, 2, 3), F(v) = 2v, LayerNorm without eps;
# 1 [2, 3, 8], F = tanh(vW + c), RMSNorm; 2 [4, 4, 4], LayerNorm; 3 [2, 5, 8], F = attention.
# block (4, 0.5 each): 0 build; 1-2 wiring with the checker's submodules (two norms with
# different gammas); 3 the student's own submodules (their two norms both start at ones).
# Each *_quick cell gives its point iff cases 0 and 1 pass.
_B_FULL = {"rms_module_quick": 1.0, "rms_module_battery": 3.5, "pre_ln_quick": 1.0,
           "pre_ln_battery": 2.0, "post_ln_quick": 1.0, "post_ln_battery": 2.0,
           "block_quick": 1.0, "block_battery": 2.0,
           "block_warmup_why": 0.0}  # answered: needs manual grade, 0 until graded


def _b(**points: float) -> dict[str, float]:
    return {**_B_FULL, **points}


_BLOCK_EXPECTED = {
    "correct": _b(),
    # stubs raise NotImplementedError in __init__ / the body: every case "raises"; the
    # unchanged written cell scores 0 automatically
    "blank": {k: 0.0 for k in _B_FULL},
    # post_ln left as released (raises in every case); written answer left as released
    "partial": _b(post_ln_quick=0.0, post_ln_battery=0.0),
    # float16 statistics overflow on case 3 only (bfloat16's range holds 300**2): 6 of 7
    "low_precision_stats": _b(rms_module_battery=3.0),
    # float32 out is wrong for the float16 (3) and bfloat16 (4) inputs: 5 of 7
    "wrong_dtype": _b(rms_module_battery=2.5),
    # a plain tensor fails the parameter case 0 only (the checker can still copy a weight
    # into it): 6 of 7, and the visible check needs case 0; the block does not care
    "module_weight": _b(rms_module_quick=0.0, rms_module_battery=3.0),
    # Norm(x) + F(Norm(x)) differs from x + F(Norm(x)) in every pre_ln case: 0 of 4; the
    # block builds (case 0) but is wrong on 1, 2 and its own modules (3): 1 of 4
    "residual_from_normed": _b(pre_ln_quick=0.0, pre_ln_battery=0.0,
                               block_quick=0.0, block_battery=0.5),
    # Norm(x + F(x)) vs x + F(Norm(x)) differ on every case, both ways round: 0 of 4 each
    "pre_post_swapped": _b(pre_ln_quick=0.0, pre_ln_battery=0.0,
                           post_ln_quick=0.0, post_ln_battery=0.0),
    # pre_ln: F(Norm(x)) is never x + F(Norm(x)): 0 of 4. post_ln: Norm(F(x)) = LN(2x) =
    # LN(3x) = Norm(x + F(x)) with the seed's F(v) = 2v (LayerNorm without eps is
    # scale-invariant), but the seed case also runs F(v) = (v3, v1, v2), where it is wrong, as on
    # the rest: 0 of 4. block: builds (forward changes x); without the first residual wrong on
    # 1-3: 1 of 4
    "missing_residual": _b(pre_ln_quick=0.0, pre_ln_battery=0.0,
                           post_ln_quick=0.0, post_ln_battery=0.0,
                           block_quick=0.0, block_battery=0.5),
    # x + Norm(F(x)): on the seed token x + LN(2x) = x + LN(x), not x + 2 LN(x) nor LN(3x);
    # wrong on every case of both: 0 of 4 each
    "norm_on_sublayer_output": _b(pre_ln_quick=0.0, pre_ln_battery=0.0,
                                  post_ln_quick=0.0, post_ln_battery=0.0),
    # x + F(x) = 3x on the seed token, neither x + 2 LN(x) nor LN(3x); wrong everywhere: 0 of 4
    "missing_norm": _b(pre_ln_quick=0.0, pre_ln_battery=0.0,
                       post_ln_quick=0.0, post_ln_battery=0.0),
    # swapped norms differ only where the two gammas differ (cases 1, 2); the student's own
    # two norms are both ones, so case 3 passes: 2 of 4
    "norms_swapped": _b(block_quick=0.0, block_battery=1.0),
    # input_layernorm used twice: wrong where the gammas differ (1, 2), invisible on 3: 2 of 4
    "shared_norm": _b(block_quick=0.0, block_battery=1.0),
    # mlp(norm(x)) instead of mlp(norm(h)): wrong on 1, 2 and 3 (h != x): 1 of 4
    "mlp_reads_x": _b(block_quick=0.0, block_battery=0.5),
    # no self_attn / input_layernorm / post_attention_layernorm: every case fails to build
    "missing_attribute": _b(block_quick=0.0, block_battery=0.0),
}

ANSWERS = _BLOCK_ANSWERS
EXPECTED = _BLOCK_EXPECTED
