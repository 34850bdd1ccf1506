"""How much time the diagnosis (normref.diagnosis.refine: tracing, identification, probes,
measurements) adds to a checker call: every answer of the corpus (tests/corpus/wrong_answers.py)
checked with the diagnosis and with it switched off, CPU time (process_time), the median of
``--repeat`` runs each. ``python -m tools.bench.diagnosis [--repeat 3]``."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]


def main() -> None:
    import torch

    import normref.diagnosis as diagnosis
    from corpus.figures import FUNCTIONS, check
    from corpus.wrong_answers import CORRECT, WRONG

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    n = ap.parse_args().repeat
    torch.set_num_threads(1)
    real = diagnosis.refine

    def cpu(question, code):
        out = []
        for _ in range(n):
            t = time.process_time()
            check(question, code)
            out.append(time.process_time() - t)
        return statistics.median(out)

    rows = []
    for a in WRONG + CORRECT:
        check(a.question, a.code)  # warm: imports, first torch kernels
        with_ = cpu(a.question, a.code)
        diagnosis.refine = lambda *args, **kw: None
        try:
            without = cpu(a.question, a.code)
        finally:
            diagnosis.refine = real
        rows.append((a, with_, without))
    by_q: dict = {}
    for a, w, wo in rows:
        by_q.setdefault(a.question, []).append(w - wo)
    print(f"added CPU per checker call (median of {n}), wrong answers, by question: median / max")
    for q, d in by_q.items():
        print(f"  {q:20s} {1e3 * statistics.median(d):7.1f} ms / {1e3 * max(d):7.1f} ms  ({len(d)} answers)")
    ok = [w - wo for a, w, wo in rows if a in CORRECT]
    print(f"correct answers (nothing to diagnose): median {1e3 * statistics.median(ok):.1f} ms, "
          f"max {1e3 * max(ok):.1f} ms")
    worst = max(rows, key=lambda r: r[1] - r[2])
    print(f"largest: {worst[0].name} ({worst[0].question}), {1e3 * worst[1]:.0f} ms with, "
          f"{1e3 * worst[2]:.0f} ms without")
    graded_rows = []
    for a in WRONG:
        if a.question not in FUNCTIONS:
            continue
        with_ = cpu_graded(a.question, a.code, n)
        diagnosis.refine = lambda *args, **kw: None
        try:
            without = cpu_graded(a.question, a.code, n)
        finally:
            diagnosis.refine = real
        graded_rows.append((a, with_ - without))
    d = [x for _, x in graded_rows]
    worst = max(graded_rows, key=lambda r: r[1])
    print(f"as grading replays the hand-back ({len(d)} wrong function answers): added CPU median "
          f"{1e3 * statistics.median(d):.1f} ms, max {1e3 * max(d):.0f} ms ({worst[0].name})")


def cpu_graded(question, code, n):
    from grader.scoring.replay import Replay
    from normref import checks
    from normref.handback import probe, run_calls

    from corpus.figures import CHECKS

    name, args, _ = CHECKS[question]
    fn = getattr(checks, name)
    records = run_calls(code, probe(fn, *args))
    out = []
    for _ in range(n):
        t = time.process_time()
        fn(Replay(records), *args)
        out.append(time.process_time() - t)
    return statistics.median(out)


if __name__ == "__main__":
    main()
