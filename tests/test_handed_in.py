"""The report says what happened (issue 30, item 5 / Why 7): start-up files and shadowing modules
handed in beside a notebook are described by what the grading kernel recorded them doing.

Before, every ``sitecustomize.py`` was "a Python start-up file: the grading kernel does not load
it" and every ``torch.py`` "ignored", though the student's own code may import or run them. Now the
kernel records each code file of the student's folder a cell opens and each module a cell
imports from it (grader/kernel/kernel_guard.py), and the report says which cell did what, or that
nothing did. One sandboxed ``grade_class`` run; the descriptions without a record are checked
without kernels.
"""
import copy
import shutil
from pathlib import Path

import nbformat
import pytest

from grader import grade_class
from grader.demo.answer_bank import ANSWERS
from grader.intake.handed_in import describe, handed_in
from grader.kernel.kernel_guard import RECORD_MIME
from grader.kernel.sandbox import available as sandbox_available

REPO = Path(__file__).resolve().parents[1]
CORRECT = ANSWERS["rmsnorm"]["correct"]["rms_norm_impl"]
# a start-up file that would define the answer, were it run
STARTUP = "import builtins\nexec(" + repr("import torch\n" + CORRECT) + ", builtins.__dict__)\n"
FULL = {"rms_norm_shape": 1.0, "rms_norm_battery": 4.0}


def _notebook(release, answer: str, added: str | None = None):
    nb = copy.deepcopy(release)
    (at,) = [i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "rms_norm_impl"]
    nb.cells[at].source = answer
    if added is not None:
        nb.cells.insert(at + 1, nbformat.v4.new_code_cell(added))
    return nb


@pytest.mark.slow
def test_the_report_says_which_cell_ran_or_imported_a_handed_in_file_and_which_were_never_run(bubblewrap, tmp_path):
    if not sandbox_available():
        pytest.fail(f"{bubblewrap} is installed but cannot create namespaces on this machine")
    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    for sub in ("source", "release"):
        shutil.copytree(REPO / sub / "rmsnorm", root / sub / "rmsnorm")
    release = nbformat.read(root / "release" / "rmsnorm" / "rmsnorm.ipynb", 4)
    students = {
        # the answer cell imports the start-up file from the student's folder: it defines rms_norm
        "imports_startup": ({"sitecustomize.py": STARTUP}, "import sitecustomize\n", None),
        # a cell the student added runs another one by path
        "runs_startup": ({"usercustomize.py": STARTUP}, CORRECT,
                         "import runpy\n_ = runpy.run_path('usercustomize.py')"),
        # a module named like an installed one, imported from the folder by putting it first again
        "imports_shadow": ({"colorsys.py": "HUE = 'mine'\n"}, CORRECT,
                           "import os, sys\nsys.path.insert(0, os.getcwd())\nimport colorsys\nprint(colorsys.HUE)"),
        # an honest helper module of the student's own: nothing to flag, nothing recorded
        "own_helper": ({"helpers.py": "import torch\n" + CORRECT}, "from helpers import rms_norm\n", None),
        # handed in, never touched: a torch.py and a start-up file
        "untouched": ({"torch.py": "raise SystemExit('not the real torch')\n", "sitecustomize.py": STARTUP},
                      CORRECT, None),
    }
    for sid, (files, answer, added) in students.items():
        folder = tmp_path / "submitted" / sid / "rmsnorm"
        folder.mkdir(parents=True)
        nbformat.write(_notebook(release, answer, added), folder / "rmsnorm.ipynb")
        for name, text in files.items():
            (folder / name).write_text(text)
    run = grade_class(course_root=root, submissions=tmp_path / "submitted", jobs=2, cell_timeout=60,
                      use_sandbox=True, log=lambda *_: None)
    assert run.sandboxed
    assert {sid: run.scores[("rmsnorm", sid)] for sid in students} == dict.fromkeys(students, FULL)
    flags = {sid: [f for f in run.report.flags.get(sid, []) if "handed in beside the notebook" in f]
             for sid in students}
    assert flags["imports_startup"] == [
        "rmsnorm: sitecustomize.py (a Python start-up file, handed in beside the notebook): the grading kernel "
        "does not load start-up files (its home, IPython profile and user site are the sandbox's own), but the "
        "student's own code ran it: cell 'rms_norm_impl' imported it as module 'sitecustomize' from the "
        "student's folder (`import sitecustomize`)"], flags["imports_startup"]
    assert flags["runs_startup"] == [
        "rmsnorm: usercustomize.py (a Python start-up file, handed in beside the notebook): the grading kernel "
        "does not load start-up files (its home, IPython profile and user site are the sandbox's own), but the "
        "student's own code ran it: a cell the student added opened it (as `%run`, `exec(open(...).read())` or "
        "an import do) (`_ = runpy.run_path('usercustomize.py')`)"], flags["runs_startup"]
    assert flags["imports_shadow"] == [
        "rmsnorm: colorsys.py (named like the standard-library module 'colorsys', handed in beside the notebook): "
        "the grading kernel searches the student's folder last, so `import colorsys` gets the standard-library "
        "one, but the student's own code loaded it: a cell the student added imported it as module 'colorsys' "
        "from the student's folder (`import colorsys`)"], flags["imports_shadow"]
    assert flags["untouched"] == [
        "rmsnorm: sitecustomize.py (a Python start-up file, handed in beside the notebook): never run or "
        "imported: the grading kernel does not load start-up files (its home, IPython profile and user site are "
        "the sandbox's own), and no cell opened or imported it (the grading kernel's record)",
        "rmsnorm: torch.py (named like the installed module 'torch', handed in beside the notebook): never run "
        "or imported: the grading kernel searches the student's folder last, so `import torch` gets the "
        "installed one, and no cell opened or imported it (the grading kernel's record)"], flags["untouched"]
    assert flags["own_helper"] == [] and "own_helper" not in run.report.flags, run.report.flags.get("own_helper")
    helper = nbformat.read(root / "autograded" / "own_helper" / "rmsnorm" / "rmsnorm.ipynb", 4)
    assert not [o for c in helper.cells for o in c.get("outputs", []) if RECORD_MIME in o.get("data", {})]
    # the record is the kernel's, in the cell that did it (the student reads it in the feedback too)
    nb = nbformat.read(root / "autograded" / "imports_startup" / "rmsnorm" / "rmsnorm.ipynb", 4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "rms_norm_impl"]
    (record,) = [o.data[RECORD_MIME] for o in cell.outputs if RECORD_MIME in o.get("data", {})]
    assert record == {"opened": ["sitecustomize.py"], "imported": {"sitecustomize": "sitecustomize.py"}}


def test_without_a_record_the_report_says_what_is_known(tmp_path):
    """Graded without the sandbox (no kernel guard, no record), or not graded at all: the report
    says so, and what the notebook's code names, never that the file was ignored."""
    folder, autograded = tmp_path / "submitted", tmp_path / "autograded"
    folder.mkdir()
    autograded.mkdir()
    (folder / "sitecustomize.py").write_text("x = 1\n")
    (folder / "normref").mkdir()
    (folder / "normref" / "__init__.py").write_text("")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sitecustomize\nprint(sitecustomize.x)")])
    nbformat.write(nb, autograded / "a.ipynb")
    assert [h.path for h in handed_in(folder)] == ["sitecustomize.py", "normref/"]
    assert describe(folder, autograded, sandboxed=False) == [
        "sitecustomize.py (a Python start-up file, handed in beside the notebook): graded WITHOUT the sandbox, "
        "which records nothing: whether it ran or was imported is unknown; a cell the student added names it "
        "(`import sitecustomize`)",
        "normref/ (named like the installed module 'normref', handed in beside the notebook): graded WITHOUT the "
        "sandbox, which records nothing: whether it ran or was imported is unknown; no cell names it"]
    assert describe(folder, None, sandboxed=True) == [
        "sitecustomize.py (a Python start-up file, handed in beside the notebook): not run: the notebook was not "
        "graded",
        "normref/ (named like the installed module 'normref', handed in beside the notebook): not run: the "
        "notebook was not graded"]
    assert describe(tmp_path / "nothing", None, sandboxed=True) == []
