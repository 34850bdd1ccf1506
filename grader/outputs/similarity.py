"""Similar submissions: pairs of students whose answer code is near-identical.

For each assignment, a student's *answer code* is the source of their answer cells (nbgrader
solution cells of type code, in notebook order) in the autograded notebooks. It is compared with
`copydetect <https://github.com/blingenf/copydetect>`_ (winnowing, Schleimer et al. 2003, as in
MOSS): its Python lexer replaces every name with one letter and drops whitespace and comments,
so renaming variables and reformatting do not hide a copy. Three kinds of code are *boilerplate*
(their fingerprints are removed before comparing, copydetect's ``boilerplate``):

* the starter code: the released notebook's answer cells (signature, docstring, stub);
* the reference solution: the source notebook's answer cells (a student who types the
  lesson's solution has copied the lesson, not a classmate);
* passages common to many submissions: a fingerprint found in more than
  :data:`COMMON_SHARE` of the submissions (at least :data:`COMMON_MIN` of them), MOSS's ``-m``.

A pair's *score* is copydetect's similarity (tokens in common / the tokens of the student's
code that are not boilerplate), the smaller of the two students' values; a pair is listed when
its score is at least :data:`THRESHOLD` and the code in common is at least
:data:`MIN_OVERLAP` characters of normalised code (about two lines: a shared one-token slip is
not evidence). How the numbers were chosen is in ``tests/test_similarity.py`` and docs/CLASS_REPORT.md.
"""
from __future__ import annotations

import contextlib
import hashlib
import html
import io
import itertools
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import nbformat
import numpy as np

__all__ = ["THRESHOLD", "MIN_OVERLAP", "COMMON_SHARE", "COMMON_MIN", "K", "WIN", "Pair",
           "answer_code", "similar_pairs", "side_by_side"]

#: copydetect's noise threshold (k-gram length, characters of normalised code) and window
#: (guarantee threshold 30 - 25 + 1): its command-line defaults.
K, WIN = 25, 6
#: A pair is listed from this score on (smaller of the two similarities).
THRESHOLD = 0.8
#: ... and when at least this much normalised code (characters) is in common.
MIN_OVERLAP = 60
#: A fingerprint in more than this share of the submissions (and at least COMMON_MIN of them) is
#: boilerplate: code most of the class wrote is not evidence that two of them copied.
COMMON_SHARE, COMMON_MIN = 0.2, 4


def _solution_sources(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"
            and c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def answer_code(notebooks: list[Path]) -> str:
    """The answer cells' code of one submission (its notebooks in order), joined by blank lines."""
    parts: list[str] = []
    for p in notebooks:
        try:
            nb = nbformat.read(p, as_version=4)
        except Exception:  # noqa: BLE001 - an unreadable notebook has no code to compare
            continue
        parts += _solution_sources(nb)
    return "\n\n".join(parts)


def stable_kgram_hashes(string: str, k: int) -> np.ndarray:
    """The hash of every ``k``-character substring of ``string``: ``[len(string) - k + 1]`` int64.

    copydetect 0.5 hashes k-grams with Python's ``hash()``, which is salted per process
    (``PYTHONHASHSEED``): winnowing then keeps different fingerprints in each run and a pair's
    score moved by up to 0.1 between two runs of the same class. This hash (the first
    8 bytes of BLAKE2b) is the same in every process, so a score is reproducible.
    """
    return np.array([int.from_bytes(hashlib.blake2b(string[i:i + k].encode(), digest_size=8).digest(),
                                    "little", signed=True) for i in range(len(string) - k + 1)],
                    dtype=np.int64)


@contextlib.contextmanager
def _stable_hashes():
    from copydetect import utils

    salted = utils.hashed_kgrams
    utils.hashed_kgrams = stable_kgram_hashes
    try:
        yield
    finally:
        utils.hashed_kgrams = salted


def _fingerprint(code: str, boilerplate=None):
    from copydetect import CodeFingerprint

    with _stable_hashes():
        return CodeFingerprint("answer.py", K, WIN, boilerplate=[] if boilerplate is None else boilerplate,
                               fp=io.StringIO(code), language="python")


def _hashes(code: str) -> set[int]:
    return set(int(h) for h in _fingerprint(code).hashes) if code.strip() else set()


@dataclass
class Pair:
    """Two submissions of one assignment with near-identical answer code.

    Attributes:
        score: the smaller of the two copydetect similarities (0..1).
        scores: each student's similarity: the share of their own non-boilerplate code that
            is in common.
        overlap: characters of normalised code in common.
        code: each student's answer code; slices: the common parts (``[starts, ends]`` in it).
    """

    assignment: str
    a: str
    b: str
    score: float
    scores: tuple[float, float]
    overlap: int
    code: tuple[str, str]
    slices: tuple

    def to_json(self) -> dict:
        return {"assignment": self.assignment, "students": [self.a, self.b], "score": round(self.score, 3),
                "scores": [round(s, 3) for s in self.scores], "overlap": self.overlap}


def similar_pairs(course_root: Path, assignment: str, students: list[str], *,
                  threshold: float = THRESHOLD, min_overlap: int = MIN_OVERLAP,
                  all_pairs: bool = False) -> list[Pair]:
    """Pairs of ``students`` whose answer code of ``assignment`` is near-identical, best first.

    Args:
        course_root: the course (``release/``, ``source/``, ``autograded/<student>/<assignment>/``).
        threshold, min_overlap: see :data:`THRESHOLD` and :data:`MIN_OVERLAP`.
        all_pairs: return every compared pair (for choosing the threshold), not only those above.

    Returns:
        :class:`Pair` list, highest score first. Submissions whose code is only boilerplate
        (unanswered) are not compared.
    """
    from copydetect import compare_files

    root = Path(course_root)
    starter = "\n\n".join(answer_code(sorted((root / d / assignment).glob("*.ipynb"))) for d in ("release", "source"))
    base = _hashes(starter)
    codes = {s: answer_code(sorted((root / "autograded" / s / assignment).glob("*.ipynb"))) for s in students}
    codes = {s: c for s, c in codes.items() if c.strip()}
    seen: Counter = Counter()
    for c in codes.values():
        seen.update(_hashes(c))
    limit = max(COMMON_MIN, COMMON_SHARE * len(codes))
    boiler = np.array(sorted(base | {h for h, n in seen.items() if n > limit}), dtype=np.int64)
    fps = {s: _fingerprint(c, boiler) for s, c in codes.items()}
    fps = {s: f for s, f in fps.items() if len(f.hashes)}
    out: list[Pair] = []
    for a, b in itertools.combinations(sorted(fps), 2):
        overlap, (s1, s2), slices = compare_files(fps[a], fps[b])
        score = float(min(s1, s2))
        if all_pairs or (score >= threshold and overlap >= min_overlap):
            out.append(Pair(assignment, a, b, score, (float(s1), float(s2)), int(overlap),
                            (codes[a], codes[b]), slices))
    out.sort(key=lambda p: (-p.score, -p.overlap, p.a, p.b))
    return out


def _marked(code: str, slices) -> str:
    """``code`` as HTML with the common parts in ``<mark>``."""
    if slices is None or len(slices) == 0 or len(slices[0]) == 0:
        return html.escape(code)
    out, pos = [], 0
    for start, end in sorted(zip(np.asarray(slices[0]).tolist(), np.asarray(slices[1]).tolist())):
        start, end = max(start, pos), min(end, len(code))
        if start >= end:
            continue
        out.append(html.escape(code[pos:start]))
        out.append(f"<mark>{html.escape(code[start:end])}</mark>")
        pos = end
    out.append(html.escape(code[pos:]))
    return "".join(out)


def side_by_side(p: Pair) -> str:
    """An HTML table: the two students' answer code side by side, common code highlighted."""
    return ("<table class='sbs'><tr>"
            f"<th>{html.escape(p.a)} ({100 * p.scores[0]:.0f}% of it in common)</th>"
            f"<th>{html.escape(p.b)} ({100 * p.scores[1]:.0f}% of it in common)</th></tr><tr>"
            f"<td><pre>{_marked(p.code[0], p.slices[0])}</pre></td>"
            f"<td><pre>{_marked(p.code[1], p.slices[1])}</pre></td></tr></table>")
