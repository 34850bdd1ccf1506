"""Groups of wrong answers: submissions whose wrong outputs agree on a graded battery.

No student code runs here. Each question of the course (:func:`grader.scoring.questions.questions`) with a drawn
battery is a hidden test that hands the student's outputs on the run's drawn inputs back to
the grader (``hand_back(grade_id, fn)``); the scoring stage replays them through the checker in
the grader's own process (:func:`grader.scoring.scores.score_notebook`) and keeps, in the test cell's
output metadata, the record of what they computed case by case
(:func:`normref.diagnosis.record.result_record`). Every student graded in one run has the same
inputs, so their records compare. This module reads the records from the autograded notebooks:
submissions of one question whose records agree (:func:`normref.diagnosis.record.agree`: the
same inputs, the same cases passed, every failing output within twice the checker's tolerance)
form a group, named or not. A group carries the trusted scoring's diagnosis of its first member
(a known fault kind, a variant found by :mod:`normref.diagnosis`, or what was measured), one
representative answer cell and who is in it.

Questions still scored inside the kernel (a checker called in a test cell, no outputs handed
back) have no record: they are reported as not grouped, as are submissions graded in another
run (other inputs: grouped among themselves) and notebooks scored before records were kept.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from normref.diagnosis.record import agree
from normref.faults import METADATA_KEY

__all__ = ["Group", "question_records", "handed_back_name", "answer_source", "unrecorded_questions",
           "group_records", "mistake_groups"]

_HAND_BACK = re.compile(r"\bhand_back\(\s*[\"']([\w-]+)[\"']\s*,\s*([A-Za-z_]\w*)\s*\)")
_CALL = re.compile(r"\b(check_[a-z_]+)\(\s*([A-Za-z_]\w*)\s*((?:,\s*[^()\n]*?)?)\)")


def _nbg(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def handed_back_name(source: str, grade_id: str) -> str | None:
    """The name a test cell hands back for ``grade_id`` (``hand_back("<grade_id>", name)``), or
    the first name a checker is called on in it, or None."""
    for gid, name in _HAND_BACK.findall(source):
        if gid == grade_id:
            return name
    m = _CALL.search(source)
    return m.group(2) if m else None


def question_records(nb, course_root: Path | None = None) -> dict[str, tuple[dict, str | None]]:
    """``{grade_id: (record, the name handed back)}`` of an autograded notebook's scored
    questions (the record :func:`grader.scoring.scores.score_class` put in the test cell's output
    metadata). Only test cells of the course's questions (:func:`grader.scoring.questions.questions`) are read."""
    from ..scoring.questions import questions
    from ..scoring.scores import RECORD_KEY

    qs = questions(course_root)

    out: dict[str, tuple[dict, str | None]] = {}
    for cell in nb.cells:
        gid = _nbg(cell).get("grade_id")
        if cell.get("cell_type") != "code" or gid not in qs:
            continue
        for o in cell.get("outputs", []):
            rec = ((o.get("metadata") or {}).get(METADATA_KEY) or {}).get(RECORD_KEY)
            if isinstance(rec, dict) and isinstance(rec.get("cases"), list):
                out[gid] = (rec, handed_back_name(cell.get("source", ""), gid))
    return out


def unrecorded_questions(nb, course_root: Path | None = None) -> list[str]:
    """Grade ids of the test cells that call a course checker on the student's code (not a
    quick self-check: no keyword arguments) and are not scored from handed-back outputs: their
    outputs are not kept, so they cannot be grouped."""
    from normref import checks

    from ..scoring.questions import questions

    qs = questions(course_root)

    known = {fn for fn in checks.__all__ if fn.startswith("check_")}
    out = []
    for cell in nb.cells:
        meta = _nbg(cell)
        if cell.get("cell_type") != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        if meta.get("grade_id") in qs:
            continue
        if any(fn in known and "=" not in rest for fn, _, rest in _CALL.findall(cell.get("source", ""))):
            out.append(meta.get("grade_id"))
    return out


def answer_source(nb, name: str) -> str:
    """The source of the answer cell that defines ``name`` (``def name`` / ``class name``), or ""."""
    pat = re.compile(rf"^\s*(def|class)\s+{re.escape(name)}\b", re.M)
    for cell in nb.cells:
        if cell.cell_type == "code" and _nbg(cell).get("solution") and pat.search(cell.source):
            return cell.source
    return ""


@dataclass
class Group:
    """Submissions of one assignment whose wrong outputs agree on one question's battery.

    Attributes:
        assignment, check: where (``check``: the question's grade id, the test cell's ``grade_id``).
        checker: the checker's name (``CheckResult.name``, e.g. ``layer_norm``).
        students: who is in it, sorted.
        representative: whose answer cell is shown (the first in sorted order).
        diagnosis: the checker's words for the representative: each distinct hint of its failing
            cases (case name and error sizes removed), joined by " / ".
        faults: the fault kinds of the representative's failing cases.
        variant: the variant id when the search named one, else None.
        cell: the representative's answer cell.
        failed: cases failed, of ``cases``.
    """

    assignment: str
    check: str
    checker: str
    students: list[str] = field(default_factory=list)
    representative: str = ""
    diagnosis: str = ""
    faults: list[str] = field(default_factory=list)
    variant: str | None = None
    cell: str = ""
    failed: int = 0
    cases: int = 0

    @property
    def size(self) -> int:
        return len(self.students)

    @property
    def group_id(self) -> str:
        """A stable id for links and filters: ``<assignment>-<checker>-<n>`` is set by the caller."""
        return getattr(self, "_id", "")

    def to_json(self) -> dict:
        return {"assignment": self.assignment, "check": self.check, "checker": self.checker,
                "size": self.size, "students": self.students, "representative": self.representative,
                "diagnosis": self.diagnosis, "faults": self.faults, "variant": self.variant,
                "cell": self.cell, "failed": self.failed, "cases": self.cases, "id": self.group_id}


_HEAD = re.compile(r"^case '.*?': ")
_WHERE = re.compile(r"^(dx |dweight |dbias )?max abs error [^;]*?(; (dx|dweight|dbias) max abs error [^;]*)*; ")
_TAGS = re.compile(r"\s*\[(fault|variant): [^\]]+\]")


def _hint(message: str) -> str:
    text = _HEAD.sub("", message)
    text = _WHERE.sub("", text)
    return _TAGS.sub("", text).strip()


def _variant(message: str) -> str | None:
    m = re.search(r"\[variant: ([^\]]+)\]", message)
    return m.group(1) if m else None


def group_records(assignment: str, check: str, records: dict[str, dict],
                  cells: dict[str, str] | None = None) -> list[Group]:
    """Group the wrong records of one question (``{student: record}``), largest group first.

    Two students are in one group when :func:`normref.diagnosis.record.agree` holds between
    the student and the group's first member. Records with every case passed are left out.
    """
    groups: list[tuple[dict, Group]] = []
    for s in sorted(records):
        rec = records[s]
        cases = rec.get("cases") or []
        if not cases or all(c["passed"] for c in cases):
            continue
        for first, g in groups:
            if agree(first, rec):
                g.students.append(s)
                break
        else:
            bad = [c for c in cases if not c["passed"]]
            g = Group(assignment, check, rec.get("checker", check), [s], s,
                      diagnosis=" / ".join(dict.fromkeys(_hint(c["message"]) for c in bad)),
                      faults=list(dict.fromkeys(c["fault"] for c in bad if c["fault"])),
                      variant=next((v for v in (c.get("variant") or _variant(c["message"]) for c in bad) if v),
                                   None),
                      cell=(cells or {}).get(s, ""), failed=len(bad), cases=len(cases))
            groups.append((rec, g))
    out = sorted((g for _, g in groups), key=lambda g: (-g.size, g.representative))
    for i, g in enumerate(out, 1):
        g._id = f"{assignment}-{re.sub(r'[^a-z0-9]+', '-', g.checker.lower()).strip('-')}-{i}"
    return out


def mistake_groups(course_root: Path, assignments: list[str],
                   students: list[str]) -> tuple[dict[str, list[Group]], dict[str, str]]:
    """The groups of wrong answers of every assignment, from the records the scoring stage kept
    in ``autograded/<student>/<assignment>/*.ipynb`` (see the module docstring). Reads
    notebooks only: no kernel, no sandbox, no student code.

    Returns:
        ``({assignment: [Group, ...] largest first}, {what: why it is not in the groups})``:
        ``what`` is ``"<assignment>: <grade ids>"`` for questions scored in the kernel, or for
        a question graded on the inputs of several runs (grouped within each run), or
        ``"<student> (<assignment>)"`` for a notebook without records.
    """
    course_root = Path(course_root)
    out: dict[str, list[Group]] = {}
    missing: dict[str, str] = {}
    for a in assignments:
        by_question: dict[str, dict[str, dict]] = {}
        cells: dict[str, dict[str, str]] = {}
        unrecorded: list[str] = []
        for s in students:
            for p in sorted((course_root / "autograded" / s / a).glob("*.ipynb")):
                try:
                    nb = nbformat.read(p, as_version=4)
                except Exception:  # noqa: BLE001 - an unreadable notebook has no record
                    missing[f"{s} ({a})"] = f"{p.name} could not be read"
                    continue
                recs = question_records(nb, course_root)
                for gid in unrecorded_questions(nb, course_root):
                    if gid not in unrecorded:
                        unrecorded.append(gid)
                lost = [gid for gid in _drawn_questions(nb, course_root) if gid not in recs]
                if lost:
                    missing[f"{s} ({a})"] = (f"{', '.join(lost)}: no outputs recorded (none handed back, or "
                                             "scored before records were kept): not grouped")
                for gid, (rec, name) in recs.items():
                    by_question.setdefault(gid, {})[s] = rec
                    cells.setdefault(gid, {})[s] = answer_source(nb, name) if name else ""
        if unrecorded:
            missing[f"{a}: {', '.join(unrecorded)}"] = ("scored in the kernel (no outputs handed back to the "
                                                        "grader): not grouped")
        groups: list[Group] = []
        for gid, recs in by_question.items():
            runs = {r.get("inputs") for r in recs.values()}
            if len(runs) > 1:
                missing[f"{a}: {gid}"] = (f"graded on the inputs of {len(runs)} runs: wrong answers are grouped "
                                          "within each run's inputs")
            groups += group_records(a, gid, recs, cells.get(gid))
        groups.sort(key=lambda g: (-g.size, g.checker, g.representative))
        if groups:
            out[a] = groups
    return out, missing


def _drawn_questions(nb, course_root: Path | None = None) -> list[str]:
    """The grade ids of ``nb``'s test cells that are scored from handed-back outputs on drawn inputs,
    less those scored 0 for calling the reference (a broken rule, not a wrong answer to group)."""
    from normref.faults import parse_tags

    from ..scoring.questions import questions

    qs = questions(course_root)

    gids = (_nbg(c).get("grade_id") for c in nb.cells if c.get("cell_type") == "code"
            and "reference_call" not in parse_tags(c))
    return [g for g in gids if g in qs and qs[g].draw is not None]
