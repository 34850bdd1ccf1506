"""A notebook's cells run in this process as ``nbgrader validate`` runs them in a kernel, for the
tests of what the self-check and Validate say.

:func:`run_cells` executes a notebook's code cells in order in one namespace named ``__main__``,
as IPython does: each cell's source is registered in ``linecache`` under a file name of IPython's
kind (``/tmp/ipykernel_0/<n>.py``) and appended to the namespace's ``In`` history before it
runs, so the checkers read the student's cells as they do in a kernel
(:func:`normref.checks.cells.scan_findings`). With ``validate=True`` the environment says
``NBGRADER_EXECUTION=validate`` (as nbgrader validate sets it): a battery that is not fully
passed fails its cell (:func:`normref.handback.as_graded`). A cell's error is kept and the next
cell runs, as validate does. No kernel starts: the tests of the kernel itself start real ones.
"""
from __future__ import annotations

import ast
import contextlib
import io
import linecache
import os
from pathlib import Path
from dataclasses import dataclass, field


@dataclass
class CellRun:
    """One graded cell as it ran: its ``grade_id``, what it printed, the error it raised (None:
    it passed) and the check result it made (the value of the name its first call assigns:
    ``quick``, ``battery``, ``result``)."""

    grade_id: str
    printed: str
    error: BaseException | None
    result: object = None


@dataclass
class NotebookRun:
    cells: dict[str, CellRun] = field(default_factory=dict)
    namespace: dict = field(default_factory=dict)
    #: what the grading kernel's sealing cell keeps (:func:`normref.handback.seal_state`), read
    #: before the first cell ran (``run_cells(sealed=True)``); None otherwise
    sealed: dict | None = None


def _result_name(source: str) -> str | None:
    """The name a test cell assigns its check's result to (``quick = check_rms_norm(...)``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                isinstance(node.targets[0], ast.Name):
            return node.targets[0].id
    return None


def run_cells(nb, validate: bool = True, sealed: bool = False, beside=None) -> NotebookRun:
    """Run ``nb``'s code cells in order (see the module docstring); returns each graded cell's
    :class:`CellRun` and the namespace. The notebook is saved in a temporary folder and named by
    ``JPY_SESSION_NAME``, as JupyterLab names a kernel's notebook (the self-check reads the
    locked cells from it). ``sealed``: first keep what the grading kernel's sealing cell keeps
    (the threads alive now, the references' code), as ``make grade`` does before any cell.
    ``beside``: the notebook's own folder, whose other files (a self-check module released with
    it) are copied beside it and importable, as from a kernel started in that folder."""
    import shutil
    import sys
    import tempfile

    import nbformat

    ns: dict = {"__name__": "__main__", "In": [""], "Out": {}}
    out = NotebookRun(namespace=ns)
    if sealed:
        from normref.handback import seal_state

        out.sealed = seal_state()
    old = os.environ.get("NBGRADER_EXECUTION"), os.environ.get("JPY_SESSION_NAME")
    folder = tempfile.TemporaryDirectory(prefix="notebook-run-")
    path = os.path.join(folder.name, "notebook.ipynb")
    nbformat.write(nb, path)
    for f in sorted(Path(beside).iterdir()) if beside else []:
        if f.is_file() and f.suffix != ".ipynb":
            shutil.copy(f, folder.name)
    sys.path.insert(0, folder.name)
    os.environ["JPY_SESSION_NAME"] = path
    if validate:
        os.environ["NBGRADER_EXECUTION"] = "validate"
    else:
        os.environ.pop("NBGRADER_EXECUTION", None)
    try:
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            name = f"/tmp/ipykernel_0/{1000 + i}.py"  # IPython's kind of name: no such file on disk
            linecache.cache[name] = (len(cell.source), None, cell.source.splitlines(True), name)
            ns["In"].append(cell.source)
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            result_name = _result_name(cell.source)
            if result_name:
                ns.pop(result_name, None)  # not an earlier cell's result
            printed = io.StringIO()
            error = None
            with contextlib.redirect_stdout(printed):
                try:
                    exec(compile(cell.source, name, "exec"), ns)
                except BaseException as e:  # noqa: BLE001 - validate records a failing cell and goes on
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    error = e
            if gid and cell.metadata.get("nbgrader", {}).get("grade"):
                out.cells[gid] = CellRun(gid, printed.getvalue(), error,
                                         ns.get(result_name) if result_name else None)
    finally:
        for key, value in zip(("NBGRADER_EXECUTION", "JPY_SESSION_NAME"), old):
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        sys.path.remove(folder.name)
        # a module of the notebook's folder is the notebook's, not the next one's
        for name in [m for m, mod in sys.modules.items() if str(getattr(mod, "__file__", "")).startswith(folder.name)]:
            del sys.modules[name]
        folder.cleanup()
    return out


def handed(source_nb) -> dict[str, tuple[str, ...]]:
    """``{grade_id: the names its hidden test hands back}``, read from the source notebook's
    ``hand_back("<grade_id>", name, ...)`` lines."""
    out = {}
    for cell in source_nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type != "code" or not gid:
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "hand_back" and \
                    node.args and getattr(node.args[0], "value", None) == gid:
                out[gid] = tuple(a.id for a in node.args[1:] if isinstance(a, ast.Name))
    return out


def graded_in_process(nb, source_nb, run: NotebookRun, seed: int = 7) -> dict:
    """What ``make grade`` gives each question of ``nb``, without a kernel: the hand-back's own
    code (:func:`normref.handback._outputs`, as the sealed hand-back runs it) on the objects the
    notebook's run left (``run``; with what it sealed before its first cell, the kernel's threads
    among them, when it was run with ``sealed=True``), the run's inputs drawn from ``seed``
    (:func:`grader.scoring.inputs.question_inputs`), each hand-back put in its test cell (the hidden test
    of ``source_nb``) and the notebook scored by the grader (:func:`grader.scoring.scores.score_notebook`,
    the static scan of the cells included). ``{grade_id: grader.scoring.scores.Scored}``."""
    import copy

    import nbformat

    from grader.scoring import scores, inputs as scoring
    from normref import handback
    from normref.wire import MIME, load_inputs

    names = handed(source_nb)
    graded = copy.deepcopy(nb)
    hidden = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in source_nb.cells}
    for cell in graded.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type != "code" or gid not in scoring.QUESTIONS or gid not in names:
            continue
        cell.source = hidden.get(gid, cell.source)  # as autograde has it: the hidden test restored
        values = [run.namespace.get(n) for n in names[gid]]
        if any(n not in run.namespace for n in names[gid]):
            cell.outputs = [nbformat.v4.new_output("error", ename="NameError", evalue=f"name {names[gid][0]!r} "
                                                   "is not defined", traceback=[])]
            continue
        inputs = load_inputs(scoring.question_inputs(gid, seed))
        bundle, _ = handback._outputs(gid, inputs, values[0], tuple(values[1:]), run.sealed)
        if run.sealed is not None and run.sealed["changed"]():
            bundle["changed"] = run.sealed["changed"]()
        import json

        cell.outputs = [nbformat.v4.new_output("display_data", data={MIME: json.loads(json.dumps(bundle))})]
    return scores.score_notebook(graded, seed)
