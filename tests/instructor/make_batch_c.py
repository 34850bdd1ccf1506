"""Batch C of the instructor walk-through: an nbgrader submitted/ tree whose autograde takes long
enough to be interrupted (answers that sleep 12 s), a resubmission, and two symlinked notebooks."""
import sys
from pathlib import Path

import nbformat

from grader.demo import fill_answers
from grader.demo.answer_bank import ANSWERS

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1])


def write(student, variant, sleep=True):
    d = OUT / student / "rmsnorm"
    d.mkdir(parents=True, exist_ok=True)
    answers = dict(ANSWERS["rmsnorm"][variant])
    if sleep:
        answers["rms_norm_impl"] = "import time\ntime.sleep(12)\n" + answers.get(
            "rms_norm_impl", "def rms_norm(x, weight, eps=1e-6):\n    raise NotImplementedError()")
    nbformat.write(fill_answers(ROOT / "release/rmsnorm/rmsnorm.ipynb", answers), d / "rmsnorm.ipynb")
    (d / "timestamp.txt").write_text("2026-11-20 10:00:00.000000 UTC\n")
    return d


write("oscar", "correct")
write("pia", "partial")
write("quinn", "no_eps")
write("mateo", "wrong_axis")          # resubmission: was correct in batch B
for student, target in (("rosa", ROOT / "source/rmsnorm/rmsnorm.ipynb"), ("tom", Path("/etc/passwd"))):
    d = OUT / student / "rmsnorm"
    d.mkdir(parents=True, exist_ok=True)
    (d / "rmsnorm.ipynb").symlink_to(target)
    (d / "timestamp.txt").write_text("2026-11-20 10:00:00.000000 UTC\n")
print(sorted(p.name for p in OUT.iterdir()))
