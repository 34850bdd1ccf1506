"""The tamper scan (grader/intake/tamper.py) on real notebooks: which editable cell is flagged, and why.

Fast: no kernel, no nbgrader app. The locked cells are the released rmsnorm assignment's
(``import torch`` and ``from normref import check_rms_norm``); the expected findings below are
read off each source line by the rules in the module docstring, not produced by the scan.
"""
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from grader.intake.tamper import Finding, protected_bindings, scan

RELEASE = Path(__file__).resolve().parents[1] / "release" / "rmsnorm" / "rmsnorm.ipynb"
HONEST = ("def rms_norm(x, weight, eps=1e-6):\n"
          "    xf = x.float()\n"
          "    rms = (xf.pow(2).mean(-1, keepdim=True) + eps).sqrt()  # [..., 1]\n"
          "    return (weight.float() * (xf / rms)).to(x.dtype)")


def _nbg(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _submission(tmp_path: Path, answer: str, extra_cells: list[str] = ()) -> nbformat.NotebookNode:
    """The released notebook with ``answer`` in rms_norm_impl and ``extra_cells`` appended as cells
    the student added, written to disk and read back as the grader reads it."""
    nb = nbformat.read(RELEASE, as_version=4)
    for c in nb.cells:
        if _nbg(c).get("grade_id") == "rms_norm_impl":
            c.source = answer
    nb.cells += [new_code_cell(src) for src in extra_cells]
    path = tmp_path / "rmsnorm.ipynb"
    nbformat.write(nb, path)
    return nbformat.read(path, as_version=4)


def _scan_editable(nb) -> dict[str, list[Finding]]:
    """``{cell label: findings}`` for every editable code cell with a finding."""
    protected = protected_bindings([c.source for c in nb.cells if c.cell_type == "code" and _nbg(c).get("locked")])
    out = {}
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code" or _nbg(c).get("locked"):
            continue
        found = scan(c.source, protected)
        if found:
            out[_nbg(c).get("grade_id") or f"added cell {i}"] = found
    return out


def test_the_test_cells_rely_on_no_name_an_answer_could_rebind():
    """Each released test cell imports what it uses (``from normref import check_rms_norm``), so an
    answer cell that defines its own ``check_rms_norm`` or rebinds ``torch`` changes nothing a test
    cell runs: the self-check and Validate run the course's checker, as grading does."""
    for path in sorted(RELEASE.parents[1].glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        locked = [c.source for c in nb.cells if c.cell_type == "code" and _nbg(c).get("locked")]
        assert protected_bindings(locked) == {}, path
    # a locked helper that a later locked cell reads is relied on; one read by no later cell is not
    assert protected_bindings(["import numpy as np\ndef helper():\n    pass", "y = helper(np.ones(2))",
                               "not python ("]) == {"np": "numpy", "helper": None}
    assert protected_bindings(["import numpy as np", "import numpy as np\ny = np.ones(2)"]) == {}


def test_an_honest_answer_is_not_flagged(tmp_path):
    nb = _submission(tmp_path, HONEST, ["import torch\nprint(rms_norm(torch.ones(2, 3), torch.ones(3)))"])
    assert _scan_editable(nb) == {}  # re-importing torch binds the same module: allowed


def test_an_answer_defining_its_own_checker_or_torch_changes_no_test_cell(tmp_path):
    nb = _submission(tmp_path, HONEST + "\n\ndef check_rms_norm(fn, quick=False):\n    return None")
    assert _scan_editable(nb) == {}
    nb = _submission(tmp_path, "import numpy as torch\n" + HONEST)
    assert _scan_editable(nb) == {}


def test_patching_torch_in_an_added_cell_flags_that_cell_only(tmp_path):
    added = "import numpy as np\ntorch.allclose = lambda *a, **k: True\nsetattr(torch, 'equal', max)"
    nb = _submission(tmp_path, HONEST, [added])
    flagged = _scan_editable(nb)
    label = f"added cell {len(nb.cells) - 1}"
    assert list(flagged) == [label]
    assert flagged[label] == [Finding("tamper", 2, "modifies torch.allclose"),
                              Finding("tamper", 3, "setattr on torch")]


@pytest.mark.parametrize("answer, finding", [
    ("import torch.nn.functional as F\ndef rms_norm(x, weight, eps=1e-6):\n"
     "    return F.rms_norm(x, (x.shape[-1],), weight, eps)",
     Finding("reference", 3, "calls the reference F.rms_norm")),
    ("from normref import rms_norm", Finding("reference", 1, "imports the reference normref.rms_norm")),
    ("def rms_norm(x, weight, eps=1e-6):\n    return torch.nn.RMSNorm(x.shape[-1], eps=eps)(x) * weight",
     Finding("reference", 2, "calls the reference torch.nn.RMSNorm")),
])
def test_calling_the_reference_is_flagged_as_reference(tmp_path, answer, finding):
    assert _scan_editable(_submission(tmp_path, answer)) == {"rms_norm_impl": [finding]}


@pytest.mark.parametrize("source, what", [
    ("get_ipython().display_formatter.formatters.clear()", "uses get_ipython"),
    ("import ctypes", "imports ctypes"),
    ("import sys\nsys.modules['normref'] = None", "uses sys.modules"),
    ("exec('x = 1')", "uses exec"),
    ("%load_ext autoreload", "IPython magic or shell command '%load_ext'"),
    ("!pip install cheat", "IPython magic or shell command '!pip'"),
])
def test_reaching_the_interpreter_is_tamper(source, what):
    found = scan(source, {"torch": "torch"})
    assert Finding("tamper", source.count("\n") + 1, what) in found, found
    assert {f.kind for f in found} == {"tamper"}


def test_code_that_does_not_parse_costs_only_its_cell():
    assert scan("def rms_norm(x:\n    return x", {"torch": "torch"}) == []


def test_a_name_bound_inside_a_function_is_not_a_rebinding():
    src = "def rms_norm(x, weight, eps=1e-6):\n    torch = x\n    return torch * weight"
    assert scan(src, {"torch": "torch"}) == []


def test_start_up_files_in_a_submission_are_named(tmp_path):
    from grader.intake.tamper import startup_files

    for rel in ("sitecustomize.py", "usercustomize.py", "ipython_config.py", "ipython_kernel_config.py",
                "evil.pth", ".ipython/profile_default/startup/00-x.py", "helpers.py", "rmsnorm.ipynb"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    found = startup_files(tmp_path)
    assert found == [".ipython/profile_default/startup/00-x.py is part of an IPython profile (start-up scripts, "
                     "configuration)", "evil.pth is a Python start-up file",
                     "ipython_config.py is a Python start-up file",
                     "ipython_kernel_config.py is a Python start-up file",
                     "sitecustomize.py is a Python start-up file", "usercustomize.py is a Python start-up file"]


@pytest.mark.parametrize("source, what", [
    # a module this cell imports is a module: the red team's alias of the hand-back
    ("import normref.handback as h\nh.run_calls = print", "modifies h.run_calls"),
    ("from normref import checks as c\nsetattr(c, 'check_rms_norm', print)", "setattr on c"),
    ("import normref\nhb = normref.handback", "uses the grader's hand-back (normref.handback)"),
    ("from normref.handback import run_calls", "imports normref.handback"),
    # ... and the grader's other kernel modules, split out of it
    ("from normref.recorder import ReferenceRecorder", "imports normref.recorder"),
    ("import normref\nr = normref.recorder.ReferenceRecorder", "uses the grader's call recorder (normref.recorder)"),
    ("import normref as n\nenc = n.wire.encode", "uses the hand-back's wire format (normref.wire)"),
    ("import normref.calling as c\nc.CALL_TIMEOUT_S = 99", "modifies c.CALL_TIMEOUT_S"),
    # work the grader's call recorder cannot see: other threads and processes, TorchScript
    ("from concurrent.futures import ThreadPoolExecutor", "imports concurrent.futures"),
    ("import threading", "imports threading"),
    ("import multiprocessing as mp", "imports multiprocessing"),
    ("cu = torch.jit.CompilationUnit('def f(x):\\n    return x')", "uses TorchScript (torch.jit)"),
    ("from torch.jit import script", "imports torch.jit"),
    ("f = torch.compile(print)", "uses torch.compile"),
    ("ops = torch._C._nn", "uses torch's C internals (torch._C)"),
    ("def g():\n    return 1\ncells = g.__closure__", "uses __closure__"),
])
def test_the_red_team_routes_are_tamper(source, what):
    found = scan(source, {"torch": "torch"})
    assert Finding("tamper", source.count("\n") + 1, what) in found, found


def test_using_an_imported_module_without_changing_it_is_not_tamper():
    src = ("import numpy as np\nimport math\nfrom collections import OrderedDict\n"
           "d = OrderedDict()\nd['a'] = np.zeros(3)\nd['a'][0] = math.pi\n")
    assert scan(src, {"torch": "torch"}) == []


def test_an_attribute_named_like_a_grader_module_on_a_non_module_is_not_tamper():
    src = ("class Run:\n    def __init__(self):\n        self.plan = []\n        self.wire = None\n"
           "r = Run()\nsteps = r.plan\n")
    assert scan(src, {"torch": "torch"}) == []


# ---------------------------------------------------------------- one scan, two places (O2)

def test_the_grader_runs_the_student_visible_scan():
    import grader.intake.tamper
    import normref.tamper

    assert grader.intake.tamper.scan is normref.tamper.scan
    assert grader.intake.tamper.protected_bindings is normref.tamper.protected_bindings


def _cell(ns: dict, n: int, source: str) -> None:
    """Run ``source`` as IPython runs cell ``[n]``: its code in linecache, its text in ``In``."""
    import linecache

    name = f"<ipython-input-{n}-test>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    ns.setdefault("In", [""]).extend([""] * (n + 1 - len(ns["In"])))
    ns["In"][n] = source
    exec(compile(source, name, "exec"), ns)


HONEST = ("def rms_norm(x, weight, eps=1e-6):\n"
          "    rms = x.float().pow(2).mean(dim=-1, keepdim=True).add(eps).rsqrt()\n"
          "    return (x.float() * rms * weight).to(x.dtype)\n")


def _review(what: str) -> str:
    from normref.rules import review_message

    return review_message(what)


def test_the_self_check_flags_a_tamper_construct_for_review_and_keeps_the_points():
    """Only a reference seen running takes points: an import of threading in the answer's cell is
    scored on the outputs and flagged for the instructor's review, in grading's words."""
    import time

    from normref import check_rms_norm

    ns = {"__name__": "__main__"}
    _cell(ns, 1, "import torch\nfrom normref import check_rms_norm\n")
    _cell(ns, 3, "import threading\n\n" + HONEST)
    t = time.perf_counter()
    r = check_rms_norm(ns["rms_norm"], quick=True)
    assert time.perf_counter() - t < 2.0
    assert r.passed and r.score == 1 and r.breaches == []
    assert r.reviews == [_review("imports threading (line 1 of the cell that defines rms_norm)")]
    assert r.report().splitlines()[-1] == r.reviews[0] and r.problem == ""
    # the same answer without the import: nothing to say
    ns2 = {"__name__": "__main__"}
    _cell(ns2, 1, "import torch\n")
    _cell(ns2, 2, HONEST)
    assert check_rms_norm(ns2["rms_norm"]).reviews == []


def test_a_helper_in_another_cell_is_read_for_what_the_answer_uses_of_it():
    """The answer's own cell is read whole; another cell is read for the statements that bind
    what the answer uses (a helper's ``def``, with what that reads): a construct in the helper is
    flagged for the question, an unrelated import beside it is not (grading's report lists it
    apart, ``grader.scoring.scores.other_cells_reviews``)."""
    from normref import check_rms_norm

    ns = {"__name__": "__main__"}
    _cell(ns, 1, "import torch\n")
    _cell(ns, 2, "import gc\n\ndef _ms(x):\n    return x.float().pow(2).mean(dim=-1, keepdim=True)\n")
    _cell(ns, 4, "def rms_norm(x, weight, eps=1e-6):\n"
                 "    return (x.float() * (_ms(x) + eps).rsqrt() * weight).to(x.dtype)\n")
    r = check_rms_norm(ns["rms_norm"], quick=True)
    assert r.score == 1 and r.reviews == []
    _cell(ns, 5, "def _ms(x):\n    import gc\n    return x.float().pow(2).mean(dim=-1, keepdim=True)\n")
    r = check_rms_norm(ns["rms_norm"], quick=True)
    assert r.score == 1 and r.reviews == [_review("imports gc (line 2 of the cell that defines _ms)")]


def test_a_module_imported_beside_a_flagged_import_is_read_alone():
    from normref import check_rms_norm

    ns = {"__name__": "__main__"}
    _cell(ns, 1, "import torch\n")
    _cell(ns, 2, "import threading\nimport math\n")
    _cell(ns, 5, "def rms_norm(x, weight, eps=1e-6):\n"
                 "    ms = x.float().pow(2).mean(dim=-1, keepdim=True) * math.pow(1, 2)\n"
                 "    return (x.float() * (ms + eps).rsqrt() * weight).to(x.dtype)\n")
    r = check_rms_norm(ns["rms_norm"], quick=True)
    assert r.score == 1 and r.reviews == []
    _cell(ns, 6, "import threading, math\n")  # one statement binds math and imports threading
    assert check_rms_norm(ns["rms_norm"], quick=True).reviews == [
        _review("imports threading (line 1 of the cell that imports math)")]
