"""Figures for the held-out corpus (issue 31 item 5): how the course's public checkers judge
answers written without reading them (`tests/corpus/heldout.py`).

Run: `.venv/bin/python tests/corpus/heldout_figures.py` (about 10 s on one core), or with
`--markdown` for the verdict table of `tests/corpus/HELDOUT.md`.

Each answer goes through the checker a student calls (`normref.check_layer_norm(fn, "numpy")`,
`normref.check_rms_norm(fn)`, ... `normref.check_dyt(fn)`), full battery and quick check. For
every failing case of a wrong answer the message is classified by a rule you can check by hand:

* **raised**: the student's code raised, so no value came back (not counted as bare or named);
* **bare**: after the case's name and the error figures ("max abs error ... at index ...;"), each
  remaining clause is only "the values differ from the reference", an unexplained factor
  ("your dweight is the true one times -0.8165") or an unexplained location ("where they differ
  most, at (13,), yours is ... and the reference's ...", or "where your dweight and the
  reference's differ most, at (3,), ...");
* **named**: some clause states what the code does differently (a formula, an axis, a dtype, a
  missing term, a parameter, a factor explained by its statistic, an input mutated).

Whether a named statement is **true** of the code cannot be decided by a rule: the author of the
corpus read every message against the code they wrote. The verdicts are `UNTRUE` (answers with a
false or misleading statement, quoted verbatim) and `IMPRECISE` (true, but the cause the student
wrote is not what the message names); every other named wrong answer was judged true.
"""
from __future__ import annotations

import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

if __name__ == "__main__":  # run as a script: make `corpus` importable as in the tests
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import normref  # noqa: E402
from corpus.heldout import CORRECT, WRONG, Answer  # noqa: E402

CHECKS = {
    "layer_norm": lambda f, quick: normref.check_layer_norm(f, "numpy", quick=quick),
    "layer_norm_backward": lambda f, quick: normref.check_layer_norm_backward(f, quick=quick),
    "rms_norm": lambda f, quick: normref.check_rms_norm(f, quick=quick),
    "RMSNorm module": lambda f, quick: normref.check_rms_norm_module(f, quick=quick),
    "pre-LN block": lambda f, quick: normref.check_pre_ln_block(f, quick=quick),
    "pre_ln": lambda f, quick: normref.check_pre_ln(f, quick=quick),
    "post_ln": lambda f, quick: normref.check_post_ln(f, quick=quick),
    "peri_ln": lambda f, quick: normref.check_peri_ln(f, quick=quick),
    "qk_norm_logits": lambda f, quick: normref.check_qk_norm_logits(f, quick=quick),
    "dyt": lambda f, quick: normref.check_dyt(f, quick=quick),
}
LESSON = {"layer_norm": "01", "layer_norm_backward": "01", "rms_norm": "02", "RMSNorm module": "02",
          "pre_ln": "03", "post_ln": "03", "pre-LN block": "03", "peri_ln": "04", "qk_norm_logits": "04", "dyt": "04"}

# The author's hand verdicts (see the module docstring). Keys are answer names of heldout.WRONG.
UNTRUE = {
    "lnb_dweight_raw_x": [
        # case '[2, 3, 8] with a trained gamma' (and B = T = D alike): the backward has no "tokens'
        # outputs"; the student's dx is exactly right; the figures are the RMS and mean of dx, dweight
        # and dbias concatenated into one vector.
        "your tokens' outputs have RMS",
        # case 'tiny values': dweight has shape [5]; index 13 is a position in that concatenation.
        "where they differ most, at (13,)",
    ],
}
IMPRECISE = {
    "lnb_ddof1": "says 'the gradient through the variance is missing or wrong' and gives dweight's factor "
                 "sqrt((d-1)/d), but not the cause the forward checker names (dividing by n-1)",
    "lnb_var_term_sum": "says 'the gradient through the variance is missing or wrong', not that its term "
                        "lacks the 1/d (sum where the mean belongs)",
    "rms_weight_after_cast": "'cast back with .to(x.dtype)': the code does cast back; the float32 weight "
                             "multiplied after the cast promotes the result, which is not said",
}

# The words of each imprecise message the author judged (the symptom said instead of the cause): an
# answer counts as imprecise while its messages still say them.
SYMPTOM = {
    "lnb_ddof1": "the gradient through the variance is missing or wrong",
    "lnb_var_term_sum": "the gradient through the variance is missing or wrong",
    "rms_weight_after_cast": "the output dtype must be the input dtype: cast back with .to(x.dtype)",
}

_CASE = re.compile(r"^case '.*?': ")
_SECOND = re.compile(r"^with the second sublayer, F\(v\) = \(.*?\): ")
_ERROR = re.compile(r"^(?:(?:dx|dweight|dbias) )?max abs error \S+ \(rel \S+\)(?: at index \([^)]*\))?; ")
_RAISED = re.compile(r"\braised [A-Za-z_.]*(?:Error|Exception|Warning)\b")
_BARE_CLAUSES = [
    re.compile(r"the values differ from the reference\.?"),
    re.compile(r"your \w+ is the true one times -?[0-9.e+-]+\.?"),
    re.compile(r"your (?:normalised )?(?:values|output) (?:is|are) the reference's times -?[0-9.e+-]+\.?"),
    re.compile(r"where (?:they|your \w+ and the reference's) differ most, at \([^)]*\), yours is \S+ and the "
               r"reference's \S+\.?"),
]


def explanation(case) -> str:
    """The part of a failing case's message after its name and its error figures."""
    text = case.message.strip()
    if text.startswith(f"case '{case.name}': "):
        text = text[len(f"case '{case.name}': "):]
    else:
        text = _CASE.sub("", text, count=1)
    text = _SECOND.sub("", text, count=1)
    while _ERROR.match(text):
        text = _ERROR.sub("", text, count=1)
    return text.strip()


def is_bare(text: str) -> bool:
    """True when every clause of `text` is only 'values differ', an unexplained factor or location."""
    clauses = [c.strip() for c in text.split("; ") if c.strip()]
    return all(any(p.fullmatch(c) for p in _BARE_CLAUSES) for c in clauses)


@dataclass
class Outcome:
    answer: Answer
    passed: bool
    score: float
    report: str
    quick_passed: bool
    breaches: list = field(default_factory=list)
    cases: list = field(default_factory=list)   # (case name, kind, message) for each failing case

    @property
    def bare_cases(self):
        return [c for c in self.cases if c[1] == "bare"]

    @property
    def named(self) -> bool:
        """Every failing case that returned a value names a difference (and at least one failed)."""
        returned = [c for c in self.cases if c[1] != "raised"]
        return bool(self.cases) and all(c[1] == "named" for c in returned)


def run(answer: Answer) -> Outcome:
    check = CHECKS[answer.question]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = check(answer.code, False)
        quick = check(answer.code, True)
    cases = []
    for case in result.cases:
        if case.passed:
            continue
        if _RAISED.search(case.message):
            kind = "raised"
        else:
            kind = "bare" if is_bare(explanation(case)) else "named"
        cases.append((case.name, kind, case.message))
    return Outcome(answer, result.passed, result.score, result.report(), quick.passed, list(result.breaches), cases)


def says_untrue(o: Outcome) -> bool:
    """A statement the author judged untrue (:data:`UNTRUE`, verbatim) is still in a message."""
    return any(needle in m for needle in UNTRUE.get(o.answer.name, ()) for _, _, m in o.cases)


def says_symptom(o: Outcome) -> bool:
    """An imprecise message the author judged (:data:`SYMPTOM`) is still said."""
    return o.answer.name in IMPRECISE and any(SYMPTOM[o.answer.name] in m for _, _, m in o.cases)


def verdict(o: Outcome) -> str:
    if o.passed:
        return "PASSED (not caught)"
    if says_untrue(o):
        return "untrue"
    if not o.named:
        return "bare" if all(c[1] != "named" for c in o.cases) else "partly bare"
    return "true (imprecise)" if says_symptom(o) else "true"


def figures(wrong: list[Outcome], correct: list[Outcome]) -> dict:
    named = [o for o in wrong if o.named]
    cases = [c for o in wrong for c in o.cases]
    return {
        "wrong_total": len(wrong),
        "wrong_failing": sum(not o.passed for o in wrong),
        "named": len(named),
        "named_true": sum(not says_untrue(o) for o in named),
        "bare_answers": sum(bool(o.bare_cases) for o in wrong),
        "bare_cases": sum(c[1] == "bare" for c in cases),
        "named_cases": sum(c[1] == "named" for c in cases),
        "raised_cases": sum(c[1] == "raised" for c in cases),
        "untrue_answers": sum(says_untrue(o) for o in wrong),
        "imprecise_answers": sum(says_symptom(o) for o in wrong),
        "correct_total": len(correct),
        "correct_passing": sum(o.passed and o.quick_passed for o in correct),
    }


def markdown_table(wrong: list[Outcome]) -> str:
    rows = ["| question | answer | what the student did | first failing case's explanation (verbatim, cut at 160) "
            "| named | true |", "|---|---|---|---|---|---|"]
    for o in wrong:
        first = next((c for c in o.cases if c[1] != "raised"), o.cases[0] if o.cases else None)
        text = "" if first is None else explanation(_Case(first[0], first[2]))
        text = (text[:157] + "...") if len(text) > 160 else text
        named = "yes" if o.named else f"no ({len(o.bare_cases)} bare case(s))"
        any_named = any(c[1] == "named" for c in o.cases)
        truth = {"untrue": "**no**", "true (imprecise)": "yes, imprecise"}.get(verdict(o), "yes" if any_named else "-")
        rows.append(f"| {o.answer.question} | `{o.answer.name}` | {o.answer.what} | {text.replace('|', '/')} "
                    f"| {named} | {truth} |")
    return "\n".join(rows)


@dataclass
class _Case:
    name: str
    message: str


def main(argv: list[str]) -> int:
    wrong = [run(a) for a in WRONG]
    correct = [run(a) for a in CORRECT]
    if "--markdown" in argv:
        print(markdown_table(wrong))
        return 0
    print("CORRECT ANSWERS (each must pass the full battery and the quick check)")
    for o in correct:
        flag = "ok" if o.passed and o.quick_passed else "FALSE ACCUSATION"
        print(f"  {flag:16} {o.answer.question:20} {o.answer.name:24} score {o.score:.2f}")
        if flag != "ok":
            print("    " + o.report.replace("\n", "\n    "))
    print("\nWRONG ANSWERS")
    for o in wrong:
        print(f"  {verdict(o):20} {o.answer.question:20} {o.answer.name:24} score {o.score:.2f} "
              f"cases: {', '.join(c[1] for c in o.cases)}")
        for name, kind, message in o.cases:
            if kind == "bare":
                print(f"    bare: {message}")
    for name, needles in UNTRUE.items():
        o = next(x for x in wrong if x.answer.name == name)
        for needle in needles:
            for _, _, message in o.cases:
                if needle in message:
                    print(f"\n  UNTRUE ({name}): {message}")
    print("\nEXAMPLES (the first named case of three wrong answers per lesson)")
    for lesson in ("01", "02", "03", "04"):
        picks = [o for o in wrong if LESSON[o.answer.question] == lesson and o.named and not says_untrue(o)]
        step = max(1, len(picks) // 3)
        for o in picks[::step][:3]:
            message = next(c[2] for c in o.cases if c[1] == "named")
            print(f"  lesson {lesson} {o.answer.name}: {message}")
    f = figures(wrong, correct)
    print(f"\nFIGURES: wrong answers failing {f['wrong_failing']}/{f['wrong_total']}; named "
          f"{f['named']}/{f['wrong_total']}; true {f['named_true']}/{f['named']} of the named; answers with a bare "
          f"case {f['bare_answers']} ({f['bare_cases']} bare, {f['named_cases']} named, {f['raised_cases']} raised "
          f"failing cases); answers with an untrue statement {f['untrue_answers']}, with an imprecise one "
          f"{f['imprecise_answers']}; correct answers passing "
          f"{f['correct_passing']}/{f['correct_total']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
