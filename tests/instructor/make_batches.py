"""Build the messy LMS downloads the instructor walk-through grades (tests/instructor/PASS.md).

Notebooks are the released ones filled from the answer bank (grader.demo.fill_answers), so the
expected points of each are the answer bank's EXPECTED. Writes into the folder given (argv[1]):
  batch_a.zip   scenario 1: a messy Canvas download (rmsnorm + block)
  gradebook.csv a Canvas gradebook export for those students (+ one who never submitted)
  batch_b.zip   scenarios 4/5: resubmissions (block) and odd notebooks (symlink, 50 MB output, kernel)
"""
import stat
import sys
import zipfile
from pathlib import Path

import nbformat

from grader.demo import fill_answers
from grader.demo.answer_bank import ANSWERS

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1])
OUT.mkdir(parents=True, exist_ok=True)


def nb(assignment, variant, mutate=None):
    n = fill_answers(ROOT / "release" / assignment / f"{assignment}.ipynb", ANSWERS[assignment][variant])
    if mutate:
        mutate(n)
    return nbformat.writes(n).encode()


def add(z, name, data, date=(2026, 11, 20, 9, 0, 0)):
    zi = zipfile.ZipInfo(name, date_time=date)
    zi.external_attr = 0o644 << 16
    z.writestr(zi, data)


def add_symlink(z, name, target):
    zi = zipfile.ZipInfo(name, date_time=(2026, 11, 20, 9, 0, 0))
    zi.create_system = 3
    zi.external_attr = (stat.S_IFLNK | 0o777) << 16
    z.writestr(zi, target)


# ---- batch A: scenario 1 -------------------------------------------------------------------
with zipfile.ZipFile(OUT / "batch_a.zip", "w", zipfile.ZIP_DEFLATED) as z:
    add(z, "ada_1001_5001_rmsnorm.ipynb", nb("rmsnorm", "correct"))
    add(z, "ada_1001_5101_block.ipynb", nb("block", "correct"))
    # submitted twice: an early partial one, then a correct one re-uploaded (Canvas "-1" suffix)
    add(z, "bruno_1002_5002_rmsnorm.ipynb", nb("rmsnorm", "partial"))
    add(z, "bruno_1002_5012_rmsnorm-1.ipynb", nb("rmsnorm", "correct"))
    add(z, "bruno_1002_5102_block.ipynb", nb("block", "correct"))
    # unicode name, spaces and parentheses in the uploaded file name
    add(z, "müllerzoë_1003_5003_rmsnorm (1).ipynb", nb("rmsnorm", "correct"))
    # a student who renamed the file before upload
    add(z, "chen_1004_5004_RMSNorm final version ✓.ipynb", nb("rmsnorm", "correct"))
    # truncated JSON
    add(z, "dana_1005_5005_rmsnorm.ipynb", nb("rmsnorm", "correct")[:3000])
    # the wrong assignment's notebook under this assignment's name
    add(z, "emeka_1006_5006_rmsnorm.ipynb", nb("layernorm", "correct"))
    # an extra README at the top and inside the nested folder
    add(z, "README.txt", b"Downloaded from Canvas 2026-11-21\n")
    # a nested folder (someone re-zipped a folder)
    add(z, "late uploads/farah_LATE_1007_5007_rmsnorm.ipynb", nb("rmsnorm", "correct"))
    # an empty submission
    add(z, "gus_1008_5008_rmsnorm.ipynb", b"")

# Canvas gradebook export (the header rows Canvas writes)
(OUT / "gradebook.csv").write_text(
    "Student,ID,SIS User ID,SIS Login ID,Section,rmsnorm (2001),block (2002)\n"
    "    Points Possible,,,,,10,10\n"
    "Ada A,1001,,ada,S1,,\n"
    "Bruno B,1002,,bruno,S1,,\n"
    "Zoë Müller,1003,,zoe,S1,,\n"
    "Chen C,1004,,chen,S1,,\n"
    "Dana D,1005,,dana,S1,,\n"
    "Emeka E,1006,,emeka,S1,,\n"
    "Farah F,1007,,farah,S1,,\n"
    "Gus G,1008,,gus,S1,,\n"
    "Hana H,1009,,hana,S1,,\n", encoding="utf-8")


# ---- batch B: scenarios 4 and 5 -------------------------------------------------------------
def changed_why(n):
    for c in n.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "block_warmup_why":
            c.source = "I changed my mind: warmup is needed because LayerNorm's gain starts at zero."


def changed_code_only(n):
    for c in n.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "pre_ln_impl":
            c.source = "def pre_ln(x, sublayer, norm):\n    # tidied\n    return x + sublayer(norm(x))"


def huge_output(n):
    for c in n.cells:
        if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade_id") == "rms_norm_impl":
            c.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * (50 * 2**20))]
            c.source += "\nprint('y' * (50 * 2**20))"


def other_kernel(n):
    n.metadata["kernelspec"] = {"display_name": "Python 3 (my-conda-env)", "language": "python",
                                "name": "conda-env-myenv-py"}


with zipfile.ZipFile(OUT / "batch_b.zip", "w", zipfile.ZIP_DEFLATED) as z:
    # scenario 4: ada changes her written answer; bruno changes only code
    add(z, "ada_1001_5201_block.ipynb", nb("block", "correct", changed_why), (2026, 11, 21, 8, 0, 0))
    add(z, "bruno_1002_5202_block.ipynb", nb("block", "correct", changed_code_only), (2026, 11, 21, 8, 0, 0))
    # scenario 5
    add_symlink(z, "ivan_1010_5210_rmsnorm.ipynb", "../../../../source/rmsnorm/rmsnorm.ipynb")
    add(z, "jun_1011_5211_rmsnorm.ipynb", nb("rmsnorm", "correct", huge_output))
    add(z, "kofi_1012_5212_rmsnorm.ipynb", nb("rmsnorm", "correct", other_kernel))
    # plain new students so the batch has real autograde work to interrupt
    add(z, "lena_1013_5213_rmsnorm.ipynb", nb("rmsnorm", "eps_outside_sqrt"))
    add(z, "mateo_1014_5214_rmsnorm.ipynb", nb("rmsnorm", "correct"))
print("written", sorted(p.name for p in OUT.iterdir()))

# ---- batch D: the students asked to upload again (dana: was truncated; emeka: was the wrong notebook)
with zipfile.ZipFile(OUT / "batch_d.zip", "w", zipfile.ZIP_DEFLATED) as z:
    add(z, "dana_1005_5305_rmsnorm.ipynb", nb("rmsnorm", "correct"), (2026, 11, 22, 8, 0, 0))
    add(z, "emeka_1006_5306_rmsnorm.ipynb", nb("rmsnorm", "correct"), (2026, 11, 22, 8, 0, 0))

# ---- batch E: bruno resubmits block again (written answer unchanged, slow code) to be interrupted
def slow_code(n):
    for c in n.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "pre_ln_impl":
            c.source = "import time\ntime.sleep(15)\ndef pre_ln(x, sublayer, norm):\n    return x + sublayer(norm(x))"


with zipfile.ZipFile(OUT / "batch_e.zip", "w", zipfile.ZIP_DEFLATED) as z:
    add(z, "bruno_1002_5402_block.ipynb", nb("block", "correct", slow_code), (2026, 11, 23, 8, 0, 0))
