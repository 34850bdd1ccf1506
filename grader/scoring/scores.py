"""Scoring the hand-backs in the grader's own process, after autograde: each test cell's
handed-back outputs (:mod:`normref.wire`) replayed through the question's checker on the same
drawn cases (:mod:`grader.scoring.replay` stands in for the student's code), the points written into
nbgrader's gradebook and the checker's diagnosis into the autograded notebook (what the
feedback shows), with, in that output's metadata, the record of what the outputs computed case
by case (the class report groups wrong answers by it, :mod:`grader.outputs.groups`, without running any
code). The questions, their batteries and the drawing of a run's inputs are
:mod:`grader.scoring.inputs`'s.

Where the outputs come from: a code question's (a function's calls, a class's plan) from the
grader's clean room (:mod:`grader.kernel.cleanroom`), which put them in the question's test cell after
the kernel was gone, having removed whatever the kernel had shown there in their format (the
kernel hands back no code question: its hidden test's line is a no-op, ``nbgrader_config.py``);
a short answer's values from the kernel's hidden test (what the student's cells computed is the
answer).

A cell that hands back no outputs, or more than one set, scores 0 (flagged when it is more
than one; a code question the clean room could not run says why); so does a hand-back that says
the grader's hand-back code was changed in the kernel (its outputs may not be the grader's),
and a call in which a reference normalization was seen running
(:func:`normref.rules.observed_reference`: the one rule finding that takes points).
Everything else the rules find is scored on the outputs and flagged for the instructor's review
(:func:`normref.rules.review_message`), in the feedback and the class report: what the tamper scan
finds in the cells the question's code comes from (:func:`normref.checks.cells.question_findings`,
the self-check's own reading of the same cells), and what else the recorder saw (another thread
of the student's, the recorder switched off). The words are the self-check's and Validate's:
:func:`normref.checks.verdict.rule_lines` says both.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from normref.faults import METADATA_KEY, output_metadata
from normref.wire import MIME, Shown, decode_answer, opaque

from ..intake.repair import REMOVED_PREFIX
from ..ledger.files import write_notebook
from .replay import Replay, ReplayClass
from .questions import questions
from .inputs import plan_cases, run_check

@dataclass
class Scored:
    """One question of one notebook, scored outside the kernel.

    Attributes:
        grade_id: the hidden test's cell.
        fraction: the checker's score on the drawn battery, 0..1.
        text: the diagnosis the feedback shows.
        flags: what the report should say (several hand-backs in one cell, a reference call).
        faults, variants: the diagnosed fault kinds, for the class report (output metadata).
        record: what the handed-back outputs computed, case by case
            (:func:`normref.diagnosis.record.result_record`), for the class report's groups of
            wrong answers; None for a visible check or a cell scored 0 without replaying it.
    """

    grade_id: str
    fraction: float
    text: str
    flags: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    record: dict | None = None


#: Where :func:`score_class` keeps a question's record in its test cell's output metadata
#: (under :data:`normref.faults.METADATA_KEY`), read by :mod:`grader.outputs.groups`.
RECORD_KEY = "record"


def inputs_id(seed: int) -> str:
    """An id of one run's drawn inputs (the same for every student of the run), not the seed."""
    import hashlib

    return hashlib.sha256(f"normref-inputs:{seed}".encode()).hexdigest()[:16]


def _handbacks(cell) -> list[dict]:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") in ("display_data", "execute_result") and MIME in o.get("data", {}):
            out.append(o["data"][MIME])
    return out


def _not_handed_back(nb, cell, gid: str, found: list, why: str | None = None) -> Scored:
    """A test cell with no hand-back, or several, or another question's, or a code question the
    clean room could not run (``why``): 0 points, and why."""
    flags = ([f"{gid}: {len(found)} sets of outputs in one test cell (one is handed back): scored 0"]
             if len(found) > 1 else [])
    removed = _removed_answer(nb, cell)
    if removed:
        return Scored(gid, 0.0, f"{gid}: 0 points: {removed}", flags, [])
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in cell.get("outputs", [])
              if o.get("output_type") == "error"]
    why = why or (errors[-1] if errors else "no outputs were handed back")
    return Scored(gid, 0.0, f"{gid}: not graded ({why}): 0 points", flags)


def _changed_hand_back(gid: str, changed, findings: list | None = None, course_root: Path | None = None) -> Scored:
    """A hand-back that says the grader's hand-back code was changed in the kernel: 0 points (its
    outputs may not be the grader's: there is nothing to score), flagged; with what the scan found
    in the question's cells, for review."""
    from normref.checks.verdict import rule_lines

    names = ", ".join(str(c)[:120] for c in list(changed)[:8]) if isinstance(changed, list) else "?"
    _, reviews = rule_lines(findings or [], [], questions(course_root)[gid].backend)
    return Scored(gid, 0.0, "\n".join([f"{gid}: 0 points: the grader's hand-back code was changed in the kernel "
                                       f"before it ran ({names}); a hand-back that may not be the grader's is not "
                                       "scored"] + [f"{gid}: {r}" for r in reviews]),
                  [f"{gid}: changed the grader's hand-back in the kernel ({names}): scored 0"]
                  + [f"{gid}: {r}" for r in reviews], [])


def _replayed(gid: str, seed: int, bundle: dict, course_root: Path | None = None) -> tuple:
    """The question's checker run on the hand-back (a :class:`grader.scoring.replay.Replay` or
    :class:`grader.scoring.replay.ReplayClass` in place of the student's code): ``(CheckResult, the
    records of every call of the student's code)``."""
    q = questions(course_root)[gid]
    calls = bundle.get("cases" if q.kind == "class" else "calls")
    if isinstance(calls, dict) and "not_callable" in calls:
        return run_check(gid, seed, opaque(calls["not_callable"]), course_root), []
    if q.kind == "class":
        records = [r if isinstance(r, dict) else {} for r in calls] if isinstance(calls, list) else []
        result = run_check(gid, seed, ReplayClass(records, q.plan(plan_cases(gid, seed, course_root))), course_root)
        # every recorded call of the student's code: forward, and the own submodules' calls
        return result, [c for r in records for c in [r.get("forward")] + list(r.get("trace") or [])]
    calls = calls if isinstance(calls, list) else []
    return run_check(gid, seed, Replay(calls), course_root), calls


def _broke_the_rule(gid: str, breaches: list[str], reviews: list[str]) -> Scored:
    """A question whose calls ran a reference normalization: 0 points, said as the self-check says
    it (one line per violation, ``"0 points: calls torch's rms_norm — implement it with tensor
    operations"``, not the cases' "6/6 passed" beside it), then what else is for review."""
    text = "\n".join(f"{gid}: {r}" for r in breaches + reviews)
    return Scored(gid, 0.0, text, [f"{gid}: {b} (seen while it ran): scored 0" for b in breaches]
                  + [f"{gid}: {r}" for r in reviews], ["reference_call"])


def _score_bundle(gid: str, seed: int, bundle: dict, findings: list | None = None,
                  course_root: Path | None = None) -> Scored:
    """One question's hand-back, replayed through its checker and scored; ``findings``: what the
    tamper scan found in the cells the question's code comes from
    (:func:`normref.checks.cells.question_findings`)."""
    from normref.checks.verdict import rule_lines

    q = questions(course_root)[gid]
    if q.kind == "values":
        return _score_values(gid, seed, bundle, course_root)
    result, calls = _replayed(gid, seed, bundle, course_root)
    refs = list(dict.fromkeys(str(w) for c in calls if isinstance(c, dict) for w in c.get("references", [])))
    breaches, reviews = rule_lines(findings or [], refs, q.backend)
    if breaches:
        return _broke_the_rule(gid, breaches, reviews)
    result.reviews = reviews
    text = ("The visible check, scored by the grader:\n" if q.all_or_nothing
            else "Graded on new inputs drawn for this grading run:\n") + result.displayed()
    fraction = float(result.passed) if q.all_or_nothing else float(result.score)
    record = None
    if q.draw is not None:
        from normref.diagnosis.record import result_record

        record = result_record(result, inputs_id(seed))
    return Scored(gid, fraction, text, [f"{gid}: {r}" for r in reviews], result.faults, result.variants, record)


def question_findings_in(nb, test_cell) -> list:
    """What the tamper scan finds in the cells the question of ``test_cell`` reads, as the
    self-check finds it in the kernel (:func:`normref.checks.cells.question_findings`): the
    notebook's code cells up to the test cell, in order, its locked cells unscanned."""
    from normref.checks.cells import question_findings

    cells, locked = [], []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cells.append(cell.source)
        if cell.get("metadata", {}).get("nbgrader", {}).get("locked"):
            locked.append(cell.source)
        if cell is test_cell:
            break
    try:
        return question_findings(cells, locked)
    except Exception:  # noqa: BLE001 - reading the student's cells never breaks a score
        return []


def other_cells_reviews(nb, course_root: Path | None = None) -> list[str]:
    """For the class report: the tamper findings (not reference spellings: comparing with the
    reference in a scratch cell is allowed) in the editable code cells that no question's code
    comes from, each a line for the instructor's review, e.g. ``"For the instructor's review (no
    points taken): uses get_ipython (line 2 of a cell the student added, the cell that sets
    ip)"``. Nothing is taken for them: they change no question's code."""
    from normref.checks.cells import cell_name, question_cells
    from normref.rules import review_message
    from normref.tamper import protected_bindings, scan

    qs = questions(course_root)
    code = [c for c in nb.cells if c.cell_type == "code"]
    sources = [c.source for c in code]
    locked_cells = [c for c in code if c.get("metadata", {}).get("nbgrader", {}).get("locked")]
    locked = {c.source.strip() for c in locked_cells}
    covered: set[int] = set()
    for i, cell in enumerate(code):
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") in qs:
            covered |= {j for j, _, own, _ in question_cells(sources[: i + 1], locked) if own}
    protected = protected_bindings([c.source for c in locked_cells])
    out = []
    for i, cell in enumerate(code):
        if i in covered or cell.source.strip() in locked:
            continue
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        where = f"answer cell {gid!r}" if gid else f"a cell the student added, {cell_name(cell.source)}"
        try:
            found = [f for f in scan(cell.source, protected) if f.kind == "tamper"]
        except Exception:  # noqa: BLE001 - reading the student's cells never breaks a score
            found = []
        out += [review_message(f"{f.what} (line {f.line} of {where})") for f in found]
    return out


def score_notebook(nb, seed: int, course_root: Path | None = None) -> dict[str, Scored]:
    """Score every question's cell (``course_root``'s questions, :func:`grader.scoring.questions.questions`;
    default this repository's) of an autograded notebook from its handed-back outputs (a code
    question's from the clean room: see the module's doc): ``{grade_id: Scored}``. A cell with no
    hand-back (e.g. the function is undefined) or several scores 0."""
    out = {}
    qs = questions(course_root)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.cell_type != "code" or gid not in qs:
            continue
        found = [h for h in _handbacks(cell) if isinstance(h, dict)]
        if len(found) != 1 or found[0].get("grade_id") != gid:
            out[gid] = _not_handed_back(nb, cell, gid, found)
        elif "missing" in found[0]:  # the clean room could not make the calls (the answer is undefined...)
            out[gid] = _not_handed_back(nb, cell, gid, [], str(found[0]["missing"])[:300])
        elif found[0].get("changed"):
            out[gid] = _changed_hand_back(gid, found[0]["changed"], question_findings_in(nb, cell), course_root)
        else:
            out[gid] = _score_bundle(gid, seed, found[0], question_findings_in(nb, cell), course_root)
    return out


def _removed_answer(nb, test_cell) -> str | None:
    """Why this test cell's question has no hand-back, when the answer cell above it was replaced
    by the grader (its kernel died or hung in that question's code: ``grader.autograde.engine.STUB``), else None."""
    answer = None
    for cell in nb.cells:
        if cell is test_cell:
            break
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and cell.cell_type == "code":
            answer = cell
    if answer is None or not answer.source.startswith(REMOVED_PREFIX):
        return None
    reason = answer.source[len(REMOVED_PREFIX):].split("\n", 1)[0].strip().rstrip(".")
    aid = answer.metadata.get("nbgrader", {}).get("grade_id", "?")
    return f"the grader removed your answer cell {aid!r}: {reason}."


def _score_values(gid: str, seed: int, bundle: dict, course_root: Path | None = None) -> Scored:
    """A short answer's handed-back values, checked here by its ``normref.answers`` checker."""
    values = bundle.get("values")
    values = [decode_answer(v) for v in values[:8]] if isinstance(values, list) else []
    try:
        result = run_check(gid, seed, tuple(values), course_root)
    except Exception as e:  # noqa: BLE001 - a hand-back of the wrong arity (a changed hidden test)
        return Scored(gid, 0.0, f"{gid}: not graded (the answers handed back could not be checked: "
                      f"{type(e).__name__}): 0 points")
    shown = [f"{type(v).__name__} {v!r}" for v in values if isinstance(v, Shown)]
    note = (f"\n(handed to the grader as text, its type not being a number, tuple, string or bool: "
            f"{'; '.join(shown)})" if shown else "")
    return Scored(gid, float(result.score), "Checked by the grader:\n" + result.displayed() + note, [],
                  result.faults, result.variants)


def annotate_notebook(nb, seed: int, course_root: Path | None = None) -> dict[str, Scored]:
    """:func:`score_notebook`, then each scored test cell's outputs replaced by one display of
    its diagnosis (what the feedback shows), whose metadata carries the fault kinds and the
    record of the outputs (``metadata["normref"]["record"]``, read by :mod:`grader.outputs.groups`).
    Changes ``nb`` in place; returns ``{grade_id: Scored}``."""
    scored = score_notebook(nb, seed, course_root)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in scored:
            sc = scored[gid]
            meta = output_metadata(sc.faults, sc.variants)
            if sc.record is not None:
                meta[METADATA_KEY][RECORD_KEY] = sc.record
            cell.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": sc.text}, metadata=meta)]
    return scored


def score_class(course_root: Path, pairs, seed: int, *, db_url: str | None = None,
                log=print) -> dict[tuple[str, str], list[str]]:
    """Score every autograded notebook of ``pairs`` (``[(assignment, student)]``): write
    ``points x fraction`` into the gradebook's ``Grade`` rows (``auto_score``) and the
    diagnosis into the notebook's test cell (the feedback shows it).

    Returns:
        ``{(assignment, student): [flags]}`` for the report.
    """
    from nbgrader.api import Gradebook

    root = Path(course_root)
    url = db_url or f"sqlite:///{root / 'gradebook.db'}"
    flags: dict[tuple[str, str], list[str]] = {}
    with Gradebook(url) as gb:
        for a, st in pairs:
            for path in sorted((root / "autograded" / st / a).glob("*.ipynb")):
                nb = nbformat.read(path, as_version=4)
                scored = annotate_notebook(nb, seed, root)
                if not scored:
                    continue
                others = other_cells_reviews(nb, root)
                if others:
                    flags.setdefault((a, st), []).extend(others)
                for gid, s in scored.items():
                    try:
                        grade = gb.find_grade(gid, path.stem, a, st)
                    except Exception:  # noqa: BLE001 - nbgrader raises MissingEntry
                        continue
                    in_kernel = grade.auto_score
                    grade.auto_score = round(float(grade.max_score) * s.fraction, 2)
                    if (questions(root)[gid].all_or_nothing and in_kernel is not None and s.fraction == 0
                            and float(in_kernel) >= float(grade.max_score) > 0):
                        # same checker, same public inputs: a change made inside the kernel (or a
                        # function that is not deterministic), or an answer that needs more of its
                        # notebook than its definitions (all the clean room runs)
                        s.flags.append(f"{gid}: the notebook's own check passed in its kernel, the grader's "
                                       "scoring did not (checkers changed at run time, or the answer needs "
                                       "code of its notebook that is not a definition?): scored 0")
                    if s.flags:
                        flags.setdefault((a, st), []).extend(s.flags)
                gb.db.commit()
                write_notebook(nb, path)
    return flags


# --------------------------------------------------------------------------- pipeline stages


def scoring_stage(b) -> None:
    """``grade_class`` stage after autograde: score every graded notebook's handed-back
    outputs in this process and write the points into the gradebook; flags go to the report."""
    from ..intake.repair import Repair

    run = b.run
    pairs = list(run.autograde.graded) if run.autograde else []
    tree = b.services.tree
    flags = score_class(tree.root, pairs, b.found.scoring_seed, db_url=tree.gradebook_url, log=b.services.log)
    for (a, st), notes in flags.items():
        run.repairs.setdefault((a, st), Repair(st, a)).flags.extend(notes)
    b.services.log(f"scoring: {len(pairs)} notebooks scored outside the kernels")
