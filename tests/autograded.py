"""Autograded notebooks made in the test's own process, without nbgrader or a kernel.

:func:`write_autograded` puts a student's notebook where ``nbgrader autograde`` would
(``autograded/<student>/<assignment>/<assignment>.ipynb``): the assignment's source notebook
(hidden tests included, as autograde restores them) with the student's answer cells, and in
each graded test cell that hands back (``hand_back(grade_id, name)``) the output a kernel would
show: the student's function run on the run's drawn inputs (:func:`normref.handback.run_calls`
on :func:`grader.scoring.inputs.probe_calls`), then scored as the scoring stage scores it (without a
gradebook).
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat

from grader.scoring import scores, inputs as scoring
from grader.demo import fill_answers
from grader.outputs.groups import handed_back_name
from normref.handback import run_calls
from normref.wire import MIME

REPO = Path(__file__).resolve().parents[1]


def namespace(nb) -> dict:
    """The notebook's globals after its code cells other than the graded test cells ran (an
    answer that raises, like the release stub's NotImplementedError, leaves its name undefined
    or as the stub)."""
    ns: dict = {}
    for c in nb.cells:
        if c.cell_type != "code" or c.metadata.get("nbgrader", {}).get("grade") or "display(" in c.source:
            continue
        try:
            exec(c.source, ns)
        except Exception:  # noqa: BLE001 - a blank or broken answer raises, as in a kernel
            pass
    return ns


def write_autograded(root: Path, assignment: str, student: str, answers: dict[str, str], seed: int,
                     scored: bool = True) -> Path:
    """Write one student's autograded notebook with hand-back outputs for ``seed``'s inputs, and
    (``scored``) scored as the scoring stage scores it (:func:`grader.scoring.scores.annotate_notebook`:
    the diagnosis and the record in each test cell; no gradebook here).

    Args:
        answers: ``{answer cell grade_id: source}`` (a grade_id left out keeps the release's stub).
    """
    release = nbformat.read(REPO / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    stubs = {c.metadata["nbgrader"]["grade_id"]: c.source for c in release.cells
             if c.metadata.get("nbgrader", {}).get("solution")}
    nb = fill_answers(REPO / "source" / assignment / f"{assignment}.ipynb", {**stubs, **answers})
    ns = namespace(nb)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        q = scoring.QUESTIONS.get(gid)
        if c.cell_type != "code" or q is None or q.draw is None or q.kind != "function":
            continue  # function questions on drawn inputs only (a class's plan is not made here)
        fn = ns.get(handed_back_name(c.source, gid) or "")
        calls = run_calls(fn, scoring.probe_calls(gid, seed), scoring.QUESTIONS[gid].reference)
        c.outputs = [nbformat.v4.new_output("display_data", data={
            MIME: json.loads(json.dumps({"grade_id": gid, "calls": calls}))})]
    if scored:
        scores.annotate_notebook(nb, seed)
    out = root / "autograded" / student / assignment / f"{assignment}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return out
