"""torch is imported only where it is used (issue 22): ``import normref`` and the numpy-only
assignments' grading kernels (layernorm, layernorm_backward, practice) never import it, their
hand-backs and self-checks show what they showed with torch loaded, and a torch normalization
that a numpy answer imports and calls itself costs the question (the self-check says the rule;
the grader's clean room has no torch for a numpy assignment).

Each kernel here is a fresh interpreter running the notebook's cells in order, as the grading
kernel does: the sealing cell that nbgrader_config.py's ``HandbackInputs`` puts first (run on the
source notebook, with this run's inputs), the locked cells, the answer cells and the hidden tests
(each given its question's inputs by the same preprocessor).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from normref.handback_files import HANDBACK_ENV

REPO = Path(__file__).resolve().parents[1]

#: Runs cells (JSON on stdin) in one namespace, as a kernel would, and prints what they displayed,
#: each cell's error, and whether torch was imported, as JSON.
_KERNEL = r"""
import json, sys
spec = json.load(sys.stdin)
if spec.get("preload_torch"):
    import torch
shown = []
import IPython.display
IPython.display.display = lambda *objs, **kw: shown.extend(objs)
ns = {"__name__": "__main__", "display": IPython.display.display}
for source in spec["cells"]:
    try:
        exec(compile(source, "<cell>", "exec"), ns)
    except Exception as e:
        shown.append({"error": type(e).__name__, "message": str(e)[:300]})
print("RESULT " + json.dumps({"shown": shown, "torch": "torch" in sys.modules}, default=repr, sort_keys=True))
"""


def run_kernel(cells: list[str], *, preload_torch: bool = False, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", _KERNEL], input=json.dumps({"cells": cells, "preload_torch":
                         preload_torch}), capture_output=True, text=True, timeout=600, cwd=REPO,
                         env={**os.environ, **(env or {})})
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_import_normref_loads_no_torch_and_every_name_still_resolves():
    code = ("import sys, normref\n"
            "first = 'torch' in sys.modules\n"
            "from normref import layer_norm, rms_norm, LAYER_NORM_EPS, check_layer_norm, check_layer_norm_backward\n"
            "from normref.handback import as_graded, hand_back\n"
            "from normref.answers import check_mean_var\n"
            "numpy_only = 'torch' in sys.modules\n"
            "names = sorted(set(normref.__all__) - set(dir(normref)))\n"
            "from normref import TransformerBlock, check_pre_ln_block\n"
            "import normref.checks as checks\n"
            "ns = {}\n"
            "exec('from normref import *', ns)\n"
            "print(first, numpy_only, names, 'torch' in sys.modules, sorted(set(normref.__all__) - set(ns)),\n"
            "      normref.blocks.TransformerBlock is TransformerBlock,\n"
            "      checks.check_pre_ln_block is check_pre_ln_block,\n"
            "      sorted(set(checks.__all__) - set(dir(checks))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "[]", "True", "[]", "True", "True", "[]"], out.stdout


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """This run's graded inputs (their file), drawn as make grade draws them."""
    from grader.scoring.inputs import prepare_inputs

    root = tmp_path_factory.mktemp("lazy-course")
    _, path = prepare_inputs(root, seed=20261122, log=lambda *_: None)
    return path


def kernel_cells(assignment: str, inputs: Path, answers: dict | None = None) -> list[str]:
    """The grading kernel's cells for ``assignment``'s source notebook (its solutions, or
    ``answers`` by grade_id), after the course's HandbackInputs preprocessor."""
    from grader.ledger.apps import Course

    config = Course(REPO).config
    (give,) = [p for p in config.Autograde.autograde_preprocessors if p.__name__ == "HandbackInputs"]
    nb = nbformat.read(REPO / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if answers is not None and cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = answers.get(gid, "raise NotImplementedError()")
    old = os.environ.get(HANDBACK_ENV)
    os.environ[HANDBACK_ENV] = str(inputs)
    try:
        nb, _ = give(config=config).preprocess(nb, {"nbgrader": {"assignment": assignment}})
    finally:
        os.environ.pop(HANDBACK_ENV) if old is None else os.environ.update({HANDBACK_ENV: old})
    return ["\n".join(ln for ln in c.source.splitlines() if not ln.strip().startswith(("### BEGIN", "### END")))
            for c in nb.cells if c.cell_type == "code"]


def _env(inputs: Path) -> dict:
    return {"NBGRADER_EXECUTION": "autograde"}  # the inputs are in the cells; the kernel gets no file


def _handed_back(result: dict) -> list:
    from normref.wire import MIME

    return [s[MIME] for s in result["shown"] if isinstance(s, dict) and MIME in s]


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ["layernorm", "layernorm_backward", "practice"])
def test_a_numpy_assignments_kernel_never_imports_torch_and_hands_back_the_same(assignment, inputs):
    """The solution notebook in a fresh kernel: torch never imported; the short answers handed
    back (sealed without torch), the code questions not (their calls are the grader's clean
    room's, grader/kernel/cleanroom.py); and what it shows (self-checks and hand-backs) is what the same
    cells show in a kernel where torch is loaded and the seal is the torch one."""
    from grader.scoring.inputs import QUESTIONS

    cells = kernel_cells(assignment, inputs)
    want = {c.metadata["nbgrader"]["grade_id"] for c in nbformat.read(
        REPO / "source" / assignment / f"{assignment}.ipynb", 4).cells if "hand_back(" in c.source}
    want = {g for g in want if QUESTIONS[g].kind == "values"}
    assert ("seal(torch=False)" in cells[0]) == bool(want)
    lazy = run_kernel(cells, env=_env(inputs))
    assert lazy["torch"] is False
    assert not [s for s in lazy["shown"] if isinstance(s, dict) and "error" in s], lazy["shown"]
    backs = _handed_back(lazy)
    assert {b["grade_id"] for b in backs} == want and all("changed" not in b for b in backs)
    eager = run_kernel([cells[0].replace("seal(torch=False)", "seal()"), *cells[1:]], preload_torch=True,
                       env=_env(inputs))
    assert eager["torch"] is True
    assert lazy["shown"] == eager["shown"]


@pytest.mark.slow
def test_a_torch_assignments_kernel_hands_back_nothing(inputs):
    """rmsnorm's kernel gets neither a sealed hand-back nor any graded input: its questions are
    the clean room's; the visible checks still run in it (its self-check, with torch)."""
    cells = kernel_cells("rmsnorm", inputs)
    assert not any(".seal(" in c for c in cells)
    result = run_kernel(cells, env=_env(inputs))
    assert result["torch"] is True and _handed_back(result) == []


# A numpy LayerNorm answer that calls torch's own layer_norm, importing torch itself inside the call:
# spelled plainly (the hand-back imports torch before the call) and so that nothing can tell
# beforehand (the recorder turns its torch function mode on as soon as the import is done).
_TORCH_INSIDE = {
    "plain": ("def layer_norm(x, weight, bias, eps=1e-5):\n"
              "    import torch\n"
              "    f = getattr(torch.nn.functional, 'layer' + '_norm')\n"
              "    return f(torch.from_numpy(x).float(), (x.shape[-1],), torch.from_numpy(weight).float(),\n"
              "             torch.from_numpy(bias).float(), eps).numpy().astype(x.dtype)\n"),
    "hidden": ("def layer_norm(x, weight, bias, eps=1e-5):\n"
               "    t = __import__('to' + 'rch')\n"
               "    f = getattr(t.nn.functional, 'layer' + '_norm')\n"
               "    return f(t.from_numpy(x).float(), (x.shape[-1],), t.from_numpy(weight).float(),\n"
               "             t.from_numpy(bias).float(), eps).numpy().astype(x.dtype)\n"),
    # the course's torch module, imported inside the call: its code is the reference's
    "normref_module": ("def layer_norm(x, weight, bias, eps=1e-5):\n"
                       "    import importlib\n"
                       "    m = importlib.import_module('normref.' + 'modules')\n"
                       "    t = m.torch\n"
                       "    ln = m.LayerNorm(x.shape[-1], eps=eps)\n"
                       "    return ln(t.from_numpy(x).float()).detach().numpy().astype(x.dtype)\n"),
}


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(_TORCH_INSIDE))
def test_a_numpy_answer_that_imports_torch_and_calls_its_norm_is_still_caught(how, inputs):
    """In the kernel, the self-check (the visible test) says the rule; in the grader's clean room
    (a numpy assignment's has no torch: it cannot be imported there) every graded call of it
    raises, and the question earns 0."""
    from grader.kernel import cleanroom
    from grader.scoring.scores import score_notebook

    answer = {"layer_norm_impl": "import numpy as np\n" + _TORCH_INSIDE[how]}
    result = run_kernel(kernel_cells("layernorm", inputs, answer), env=_env(inputs))
    assert result["torch"] is True  # the answer imported it
    errors = [s for s in result["shown"] if isinstance(s, dict) and "error" in s]
    assert errors and errors[0]["message"].startswith("0 points: "), result["shown"]
    nb = nbformat.read(REPO / "source" / "layernorm" / "layernorm.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "layer_norm_impl":
            cell.source = answer["layer_norm_impl"]
    entry = cleanroom.run_notebook(nb, json.loads(inputs.read_text()), sandboxed=False)
    for gid in ("layer_norm_seed", "layer_norm_battery"):
        calls = entry["bundles"][gid]["calls"]
        assert calls and all("raised" in c for c in calls), (how, gid, calls[:1])
    assert {g: s.fraction for g, s in score_notebook(nb, 20261122).items()} == {
        "layer_norm_seed": 0.0, "layer_norm_battery": 0.0}


def test_the_kernel_is_sealed_only_to_hand_back_short_answers_and_then_without_torch(course_copy, monkeypatch):
    """HandbackInputs seals a kernel only where it hands something back, a short answer (a code
    question's calls run in the clean room), and then without torch: no short answer's inputs need
    it (normref.wire.needs_torch)."""
    from grader.ledger.apps import Course
    from grader.scoring.questions import assignments
    from grader.scoring.inputs import prepare_inputs
    from normref.handback_files import HANDBACK_ENV

    (give,) = [p for p in Course(course_copy).config.Autograde.autograde_preprocessors
               if p.__name__ == "HandbackInputs"]
    _, path = prepare_inputs(course_copy, log=lambda *_: None)
    monkeypatch.setenv(HANDBACK_ENV, str(path))
    for name, a in assignments(course_copy).items():
        (src,) = sorted((course_copy / "source" / name).glob("*.ipynb"))  # its hidden tests, as autograde runs them
        nb, _ = give().preprocess(nbformat.read(src, 4), {"nbgrader": {"assignment": name}})
        short = any(q.kind == "values" for q in a.questions)
        assert nb.cells[0].source.endswith(".seal(torch=False)") == short, (name, nb.cells[0].source)
    assert any(q.kind == "values" for q in assignments(course_copy)["practice"].questions)


def test_inputs_are_written_without_torch_for_numpy_questions(inputs):
    """A numpy or short-answer question's inputs are a pickle (its kernel reads them without
    torch); a torch question's are torch.save's archive. Both read back as written."""
    import numpy as np

    import base64

    from grader.scoring.inputs import QUESTIONS
    from normref.wire import load_inputs

    def leaves(o):
        if isinstance(o, dict):
            return [x for v in o.values() for x in leaves(v)]
        if isinstance(o, (list, tuple)):
            return [x for v in o for x in leaves(v)]
        return [o]

    texts = json.loads(inputs.read_text())
    for gid, q in QUESTIONS.items():
        zipped = base64.b64decode(texts[gid]).startswith(b"PK\x03\x04")
        assert zipped == (q.backend != "numpy" and q.kind != "values"), gid
        kinds = {type(v).__module__.split(".")[0] for v in leaves(load_inputs(texts[gid]))}
        if not zipped:
            assert kinds <= {"builtins", "numpy"}, (gid, kinds)
            assert q.kind == "values" or q.public or any(isinstance(v, np.ndarray)
                                                         for v in leaves(load_inputs(texts[gid])))
