"""normref.scopes: names read as Python resolves them, so that a parameter, a local variable or an
attribute is never taken for the global (or module, or builtin) of the same spelling, by the
reference rule's scan (normref.rules), the tamper scan (normref.tamper) and the cells a check
reads (normref.checks.cells). Each expectation is read off the source by Python's rules (the
language reference's "Resolution of names"), not produced by the code under test."""
import ast

import pytest

from normref.checks.cells import question_cells
from normref.rules import reference_calls
from normref.scopes import global_reads, module_reads, resolve
from normref.tamper import scan


def _where(source: str) -> dict[tuple[int, str], str | None]:
    """``{(line, name): "module" | "function" | "class" | None}`` for every name read."""
    tree = ast.parse(source)
    scopes = resolve(tree)
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            found = scopes.lookup(node)
            out[(node.lineno, node.id)] = None if found is None else found[0]
    return out


def test_a_parameter_a_local_and_an_attribute_are_not_the_global():
    src = ("var = 1\n"
           "def f(x, weight, norm):\n"
           "    mean = x.mean()\n"
           "    var = x.var()\n"
           "    return (x - mean) / var * weight + norm(x) + std\n")
    got = _where(src)
    assert got[(5, "var")] == got[(5, "mean")] == got[(5, "weight")] == got[(5, "norm")] == "function"
    assert got[(5, "std")] is None  # bound nowhere here: another cell's global, or a builtin
    assert module_reads(ast.parse(src)) == (set(), {"std"})  # x.var, x.mean: attributes, read nothing


@pytest.mark.parametrize("source, line, name, where", [
    ("x = 1\ndef f():\n    global x\n    x = 2\n    return x\n", 5, "x", "module"),
    ("def f():\n    x = 1\n    def g():\n        nonlocal x\n        return x\n    return g\n", 5, "x", "function"),
    ("class A:\n    w = 1\n    def f(self):\n        return w\n", 4, "w", None),  # a method skips its class
    ("class A:\n    w = 1\n    v = w\n", 3, "w", "class"),
    ("def f(xs):\n    return [v for v in xs]\n", 2, "v", "function"),
    ("def f():\n    [y := 3 for _ in range(2)]\n    return y\n", 3, "y", "function"),  # := binds outside
    ("def f(a=lambda: b):\n    b = 1\n", 1, "b", None),  # a default: the enclosing scope's
])
def test_global_nonlocal_class_comprehension_and_walrus_scopes(source, line, name, where):
    assert _where(source)[(line, name)] == where


def test_global_reads_of_a_code_object_are_its_load_globals_not_its_attributes():
    ns = {}
    exec("import numpy as np\ndef f(x, eps=1e-5):\n    var = x.var(-1)\n"
         "    return (x - x.mean()) / np.sqrt(var + eps) + [g for g in helper(x)][0]\n", ns)
    assert global_reads(ns["f"].__code__) == {"np", "helper"}


def test_the_reference_scan_reads_scopes():
    # a parameter named F, a local alias of a module, an attribute named layer_norm of a local
    assert reference_calls("def f(x, F):\n    return F.layer_norm(x, (3,))\n") == []
    assert reference_calls("def f(x, nn):\n    return nn.LayerNorm(3)(x)\n") == []
    assert reference_calls("def f(model, x):\n    return model.layer_norm(x)\n") == []
    # ... while the module itself is still seen, under any alias, and an alias assignment too
    assert reference_calls("def f(x):\n    return F.layer_norm(x, (3,))\n") == [(2, "calls F.layer_norm")]
    assert reference_calls("import torch.nn.functional as G\nH = G\ny = H.rms_norm(x)\n") == [(3, "calls H.rms_norm")]
    assert reference_calls("import normref\nln = normref.layer_norm\ny = ln(x)\n") == [
        (3, "calls ln (normref.layer_norm)")]
    # a local that shadows an imported alias is not it
    assert reference_calls("from normref import layer_norm as ln\ndef f(x, ln):\n    return ln(x)\n") == [
        (1, "imports the reference normref.layer_norm")]


def test_the_tamper_scan_reads_scopes():
    # a local named like a builtin or a module is neither
    assert scan("def f(x):\n    vars = x.var()\n    eval = vars * 2\n    return eval\n") == []
    assert scan("def f(torch):\n    torch.allclose = 1\n") == []
    assert scan("def f(x):\n    compile = lambda y: y\n    return compile(x)\n") == []
    # the builtin and the module themselves are still found
    assert [f.what for f in scan("y = eval('1')\n")] == ["uses eval"]
    assert [f.what for f in scan("import torch\ntorch.allclose = print\n")] == ["modifies torch.allclose"]
    assert scan("%matplotlib inline\n%timeit sum(range(3))\n") == []  # magics that change nothing graded


def test_a_cell_that_set_a_global_of_a_reused_name_is_not_read():
    """Lesson 01: the cell that set ``var`` with normref.layer_norm is not one the answer reads:
    its ``var`` is its own and ``x.var`` an attribute."""
    cells = ["import numpy as np\nimport normref",
             "x = 1\nvar = normref.layer_norm(x)\nprint(var)",
             "def my_layer_norm(x, weight, bias, eps=1e-5):\n    mean = x.mean(axis=-1, keepdims=True)\n"
             "    var = x.var(axis=-1, keepdims=True)\n    return (x - mean) / np.sqrt(var + eps) * weight + bias\n"
             "\nnormref.check_layer_norm(my_layer_norm, quick=True)"]
    chosen = question_cells(cells, names=("my_layer_norm",))
    assert [(i, own) for i, _, own, _ in chosen] == [(0, False), (2, True)]
    # the imports cell is read for the statements that bind what the answer reads
    assert chosen[0][3].splitlines() == ["import numpy as np", "import normref"]
    cells[0] += "\nimport threading"
    assert question_cells(cells, names=("my_layer_norm",))[0][3] == "import numpy as np\nimport normref\n"
