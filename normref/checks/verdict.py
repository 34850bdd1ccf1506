"""The rules' verdict on a student's code, as the self-check, Validate and grading all say it:
:func:`rule_lines` (breaches, which take a question's points, and lines for the instructor's
review, which do not) from what the scan finds in the code's cells (:func:`source_findings`) and
what the call recorder saw run."""
from __future__ import annotations

from ..rules import observed_reference, reference_calls_in, review_message, rule_message
from .cells import scan_findings


def source_findings(fn) -> list:
    """What the tamper scan finds in the code of ``fn`` (the student's function or class): in a
    notebook kernel, in the cells it comes from (:func:`normref.checks.cells.scan_findings`, as
    grading reads the notebook); elsewhere (a script, a test) the reference calls its own source
    spells (:func:`normref.rules.reference_calls_in`). ``[(where, own, Finding)]``."""
    from ..tamper import Finding

    if fn is None:
        return []
    try:
        found = scan_findings(fn)
    except Exception:  # noqa: BLE001 - reading the student's cells never breaks a check
        found = []
    if found or _in_notebook(fn):
        return found
    try:
        return [("its source", True, Finding("reference", line, what.replace("calls ", "calls the reference ", 1)))
                for line, what in reference_calls_in(fn)]
    except Exception:  # noqa: BLE001
        return []


def _in_notebook(fn) -> bool:
    """Is ``fn`` (or its class's methods) code of a notebook kernel's cells (``__main__`` with
    IPython's ``In``)?"""
    from .cells import _history

    try:
        return _history(fn) is not None
    except Exception:  # noqa: BLE001
        return False


def rule_lines(findings: list, ran: list[str], backend: str = "torch") -> tuple[list[str], list[str]]:
    """The verdict on the rules, one line per violation or flag: ``(breaches, reviews)``.

    A breach (0 points, :func:`normref.rules.rule_message`: ``"0 points: calls F.rms_norm —
    implement it with tensor operations"``) only for a reference seen running inside the
    student's call (``ran``, the recorder's words; :func:`normref.rules.observed_reference`),
    worded as the source spells the call when the scan found it (``findings``, e.g. ``calls
    F.rms_norm``, with its cell when that is not the answer's own), else in the recorder's words
    (``"calls torch's rms_norm"`` for ``getattr(F, "rms" + "_norm")``); one violation is said once.

    Everything else is a review (:func:`normref.rules.review_message`, no points taken): each
    tamper finding, with its line and cell; a reference the source spells that no checked call
    ran; and what else the recorder saw (another thread of the student's, the recorder switched
    off). The self-check (:func:`run`), Validate and grading (``grader.scoring.scores``) all call this.

    Args:
        findings: ``[(the cell's name, own, Finding)]`` (:func:`normref.checks.cells.question_findings`).
        ran: the recorder's records of the student's calls.
        backend: ``"numpy"``: the remedy says array operations.
    """
    tamper: list[str] = []
    # "calls rn" -> ("calls rn (torch.nn.functional.rms_norm)", where: "" in the code's own cell)
    spelled: dict[str, tuple[str, str, str]] = {}
    for where, own, f in findings:
        at = f" (line {f.line} of {where})"
        if f.kind == "reference":
            what = f.what.replace("calls the reference ", "calls ", 1)
            spelled.setdefault(what.split(" (", 1)[0], (what, "" if own else at, at))
        else:
            tamper.append(review_message(f"{f.what}{at}"))
    # a call and the import of what it calls are one violation: the call
    calls = [v for k, v in spelled.items() if k.startswith("calls ")] or list(spelled.values())
    observed = [w for w in ran if observed_reference(w)]
    breaches: list[str] = []
    reviews: list[str] = []
    if observed:
        first_call = next((w for w in observed if w.startswith("calls ")), None)
        if calls and first_call is not None:  # the call as the source spells it, said once
            breaches += [rule_message(w + at, backend) for w, at, _ in calls]
        elif first_call is not None:  # one reference call, however it ran: the first the recorder saw
            breaches.append(rule_message(first_call, backend))
        breaches += [rule_message(w, backend) for w in observed if not w.startswith("calls ")]
    else:  # spelled in the source, but no checked call ran it
        reviews += [review_message(f"{w}{at_always}, not seen running in the checked calls")
                    for w, _, at_always in calls]
    reviews = tamper + reviews + [review_message(w) for w in ran if not observed_reference(w)]
    return list(dict.fromkeys(breaches)), list(dict.fromkeys(reviews))
