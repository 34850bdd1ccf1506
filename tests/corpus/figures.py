"""The corpus's figures (issue 31 item 5): run every answer of :mod:`corpus.wrong_answers` through
its checker, in the self-check and as grading replays the hand-back, and count how each wrong
answer's failing cases are named.

``python tests/corpus/figures.py`` (from the repository root, with the course's venv) prints the
figures, one line per answer and three example messages per lesson.
"""
from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the tests folder on the path, as pytest has it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from corpus.wrong_answers import CORRECT, WRONG  # noqa: E402

#: checker name -> (check, its arguments after the answer), and which lesson it belongs to
CHECKS = {
    "layer_norm": ("check_layer_norm", ("numpy",), "01 LayerNorm"),
    "layer_norm_backward": ("check_layer_norm_backward", (), "01 LayerNorm"),
    "rms_norm": ("check_rms_norm", (), "02 RMSNorm"),
    "RMSNorm module": ("check_rms_norm_module", (), "02 RMSNorm"),
    "pre_ln": ("check_pre_ln", (), "03 placement"),
    "post_ln": ("check_post_ln", (), "03 placement"),
    "pre-LN block": ("check_pre_ln_block", (), "03 placement"),
    "peri_ln": ("check_peri_ln", (), "04 modern"),
    "qk_norm_logits": ("check_qk_norm_logits", (), "04 modern"),
    "dyt": ("check_dyt", (), "04 modern"),
}
#: questions whose grading hands back a function's outputs (a class's plan is replayed otherwise)
FUNCTIONS = ("layer_norm", "layer_norm_backward", "rms_norm", "pre_ln", "post_ln", "peri_ln", "qk_norm_logits", "dyt")
_SPECIFIC = ("other_formula", "measured", "found_variant")


def check(question: str, answer):
    from grader.scoring.questions import assignment_module

    assignment_module("layernorm_backward", "reference")  # grading's backward grammar
    from normref import checks

    name, args, _ = CHECKS[question]
    return getattr(checks, name)(answer, *args)


def graded(question: str, answer):
    """The checker as grading runs it: the kernel makes the recorded calls, the grader replays."""
    from grader.scoring.replay import Replay
    from normref import checks
    from normref.handback import probe, run_calls

    name, args, _ = CHECKS[question]
    fn = getattr(checks, name)
    return fn(Replay(run_calls(answer, probe(fn, *args))), *args)


def how_named(result) -> str:
    """How a wrong answer's failing cases are named: ``"formula"`` (the traced or identified
    formula), ``"known"`` (a fault kind of the registry), ``"search"`` (a grammar variant),
    ``"measured"``, or ``"bare"`` when a case that returned a value got only "the values differ"."""
    bad = [c for c in result.cases if not c.passed]
    if any(getattr(c, "observed", None) is not None and (c.fault == "wrong_values" or c.message.rstrip().endswith(
            "the values differ from the reference.")) for c in bad):
        return "bare"
    kinds = {c.fault for c in bad}
    if "other_formula" in kinds or any(" computes " in c.message for c in bad):
        return "formula"
    if kinds - set(_SPECIFIC):
        return "known"
    return "search" if "found_variant" in kinds else "measured"


def figures(replay: bool = True) -> dict:
    """``{"wrong": n, "failed": n, "named": {how: n}, "graded_named": {how: n}, "correct": n,
    "correct_passed": n, "rows": [(answer, how, graded how, first message)]}``."""
    rows, named, graded_named = [], {}, {}
    failed = 0
    for a in WRONG:
        r = check(a.question, a.code)
        failed += not r.passed
        how = how_named(r)
        named[how] = named.get(how, 0) + 1
        g = None
        if replay and a.question in FUNCTIONS:
            g = how_named(graded(a.question, a.code))
            graded_named[g] = graded_named.get(g, 0) + 1
        first = next((c.message for c in r.cases if not c.passed), "")
        rows.append((a, how, g, first))
    ok = sum(check(a.question, a.code).passed for a in CORRECT)
    return {"wrong": len(WRONG), "failed": failed, "named": named, "graded_named": graded_named,
            "correct": len(CORRECT), "correct_passed": ok, "rows": rows}


def main() -> None:
    f = figures()
    print(f"wrong answers: {f['wrong']}, failed: {f['failed']}; named in the self-check: {f['named']}")
    print(f"as grading replays them ({sum(f['graded_named'].values())} function answers): {f['graded_named']}")
    print(f"correct answers passing: {f['correct_passed']} of {f['correct']}")
    by_lesson: dict = {}
    for a, how, g, first in f["rows"]:
        print(f"  {a.question:20s} {a.name:28s} {how:8s} graded: {g or '-':8s}")
        by_lesson.setdefault(CHECKS[a.question][2], []).append((a, how, first))
    for lesson, items in sorted(by_lesson.items()):
        print(f"\n{lesson} (three of the messages the shared mechanisms wrote):")
        new = [(a, first) for a, how, first in items if how in ("formula", "measured")]
        picked: list = []
        for a, first in new:  # one per question first, then more of the lesson's own
            if a.question not in {x.question for x, _ in picked}:
                picked.append((a, first))
        picked += [p for p in new if p not in picked]
        for a, first in picked[:3]:
            text = first.split("': ", 1)[-1]
            print(f"  [{a.name}] {text}")


if __name__ == "__main__":
    main()
