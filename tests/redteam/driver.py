"""The red team's driver: each variant of this folder graded as a student's submission, by the
documented command, in a scratch course; one table of what each earned.

A variant is a folder ``tests/redteam/<name>/``: ``<grade_id>.cell`` is that answer cell's new
source, ``after-<grade_id>.cell`` an extra (unlocked, ungraded) code cell inserted right after
the cell ``grade_id``, ``files/`` files handed in beside the notebook (replacing the release's own
of that name), ``symlinks.json`` ``{name: target}`` symlinks handed in (``{course}`` in a target
is the scratch course's absolute path). A name starting ``honest_`` is an honest submission
(it must earn full marks with no accusation), any other an attack (it must earn no more than the
blank notebook of its assignment, graded in the same run as student ``blank-<assignment>``).

Each variant's notebook is built from ``release/<assignment>/<assignment>.ipynb`` (with the
release folder's other files, as a student gets them) and handed in as
``<incoming>/<student>/<assignment>/``; the scratch course is this checkout's tracked files with
its ``.venv`` linked; the run is README's ``python -m grader --submissions <incoming>`` there (what
``make grade SUBMISSIONS=...`` runs), once for every variant. Read back: ``grades_by_question.csv``
(points per graded cell), each student's feedback page (lines that take points or flag for
review, and leak markers), ``reports/report.json`` (the run's own flags for the student), and
the processes left running.

    .venv/bin/python tests/redteam/driver.py                 # every variant, prints the table
    .venv/bin/python tests/redteam/driver.py --only honest_decorated,plain_F_rms_norm
"""
from __future__ import annotations

import argparse
import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: Printed by a variant's own code when it read something it must not (built so its source
#: does not contain it: ``"LEAK" "ED="``), or the grader's hidden-test marker.
LEAK_MARKERS = ("LEAKED=", "BEGIN HIDDEN TESTS")
PROCESS_MARKER = "redteam-leftover"

#: What each variant tries (the REPORT's second column).
WHAT = {
    "always_valueerror": "batch_norm always raises ValueError: earns the cases that expect that error?",
    "autograd_backward": "layernorm_backward (numpy) via torch autograd through F.layer_norm",
    "cat_layer_norm": "rms_norm as F.layer_norm of [x, -x] (mean 0, var = mean(x^2))",
    "compile_aot": "torch.compile(F.rms_norm, backend='aot_eager'): the op traced into its decomposition",
    "disk_fill": "writes 2 GiB beside the notebook, in /tmp and one folder up",
    "env_probe": "prints environment, /proc/1, mounts, and globs / for gradebook.db, logs/scoring, *.npy",
    "forged_batchnorm_check": "hands in its own batchnorm_check.py whose check_batch_norm always passes",
    "fork_flood": "starts 300 processes in the kernel",
    "fuse_bn": "batch_norm (eval mode) via torch.nn.utils.fusion.fuse_linear_bn_weights",
    "json_bomb": "writes a 100 000-deep JSON array to the clean room's pipe (found by frame walking)",
    "launder_qk": "RMSNorm via the handed-out CausalSelfAttention's own q_norm",
    "leftover_process": "a double-forked setsid process and a non-daemon thread meant to outlive the kernel",
    "mem_bomb": "8 GiB in the kernel, 64 x 1 GiB in every graded call (clean room)",
    "npy_membomb": "sends the clean room's answer as a .npy header announcing 8 PiB",
    "numpy_unblock": "numpy layernorm: removes the torch-blocking import finder, calls F.layer_norm",
    "obfuscated_normref": "normref.layer_norm by importlib + getattr of built strings",
    "patch_checker": "blank answer; patches normref.check_rms_norm and the kernel's hand-back to torch's outputs",
    "plain_F_batch_norm": "batch_norm via F.batch_norm on the real tokens",
    "plain_F_rms_norm": "rms_norm = F.rms_norm",
    "rpc_flood": "pre_ln calls the grader's attention (run by the worker) on 3000 tokens",
    "static_runtime": "TorchScript static runtime's aten::layer_norm on [x, -x]",
    "static_runtime_hidden": "batch_norm through a static-runtime layer_norm, names split into pieces",
    "subclass_nn_rmsnorm": "class RMSNorm(nn.RMSNorm)",
    "symlink_solution": "hands in symlinks to the course's source notebook, answer bank and gradebook.db, reads them",
    "symlink_dangling": "hands in a symlink to a file that does not exist (its notes on another disk)",
    "symlink_dir_loop": "hands in a symlink to the course's logs/ folder",
    "token_reuse": "stashes the norm the grader hands pre_ln and uses it as its own RMSNorm",
    "type_confusion": "sends {'cases': 5} as the clean room's answer from RMSNorm.__init__",
    "honest_backward_partial": "backward with functools.partial helpers, its own finite-difference check after",
    "honest_batchnorm_dataclass": "batch_norm with a frozen dataclass of statistics in a helper cell",
    "honest_block_closures": "pre_ln as functools.partial, post_ln as a lambda, a shared helper",
    "honest_decorated": "rms_norm under a functools.wraps decorator and torch.no_grad(); lesson names after",
    "honest_dtype_table": "a dtype table filled by .update() at module level",
    "honest_modern_einsum": "qk logits by einsum, dyt by addcmul; nn.LayerNorm/nn.RMSNorm in a scratch cell",
    "honest_noisy": "%%time answer cell, a spinner thread, tqdm, 5000 printed lines, a plot, %timeit",
    "honest_numpy_helpers": "layer_norm as a callable object, helpers named mean and var",
    "honest_percent_docstring": "a docstring with a %timeit line in it",
    "honest_reference_names": "own helpers named rms_norm, layer_norm, F; a local named layer_norm",
    "honest_scratch_reference": "a scratch cell calling F.rms_norm and normref.rms_norm before the answer",
}


@dataclass
class Row:
    variant: str
    assignment: str
    kind: str  # attack | honest
    student: str
    got: float = 0.0
    possible: float = 0.0
    blank: float = 0.0
    per_cell: dict = field(default_factory=dict)
    feedback_lines: list = field(default_factory=list)  # points taken / review, from the feedback page
    report_flags: list = field(default_factory=list)
    leaks: list = field(default_factory=list)
    verdict: str = ""


def _release_cells() -> dict[str, tuple[str, dict]]:
    """grade_id -> (assignment, its nbgrader metadata), over every release notebook."""
    out = {}
    for nb_path in sorted((REPO / "release").glob("*/*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade_id"):
                out[meta["grade_id"]] = (nb_path.parent.name, meta)
    return out


def variants(only: list[str] | None = None) -> list[str]:
    names = sorted(p.name for p in HERE.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    if only:
        missing = set(only) - set(names)
        if missing:
            raise SystemExit(f"no such variant: {', '.join(sorted(missing))}")
        names = [n for n in names if n in only]
    return names


def student_of(variant: str) -> str:
    return variant.lower().replace("_", "-")


def assignment_of(variant: str, cells) -> str:
    ids = {p.name.removeprefix("after-").removesuffix(".cell") for p in (HERE / variant).glob("*.cell")}
    assignments = {cells[i][0] for i in ids}
    if len(assignments) != 1:
        raise SystemExit(f"{variant}: its cells name {sorted(assignments) or 'no'} assignment(s), need one")
    return assignments.pop()


def build_notebook(variant: str | None, assignment: str):
    nb = nbformat.read(REPO / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    if variant is None:
        return nb
    folder = HERE / variant
    cells = []
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        answer = folder / f"{gid}.cell"
        if gid and answer.exists():
            cell.source = answer.read_text().rstrip("\n")
        cells.append(cell)
        after = folder / f"after-{gid}.cell"
        if gid and after.exists():
            cells.append(new_code_cell(after.read_text().rstrip("\n")))
    nb.cells = cells
    return nb


def hand_in(incoming: Path, course: Path, student: str, assignment: str, variant: str | None) -> None:
    dest = incoming / student / assignment
    dest.mkdir(parents=True)
    for f in (REPO / "release" / assignment).iterdir():  # what the student was given
        if f.is_file() and f.suffix != ".ipynb":
            shutil.copy2(f, dest / f.name)
    nbformat.write(build_notebook(variant, assignment), dest / f"{assignment}.ipynb")
    if variant is None:
        return
    files = HERE / variant / "files"
    if files.is_dir():
        for f in files.iterdir():
            shutil.copy2(f, dest / f.name)
    links = HERE / variant / "symlinks.json"
    if links.exists():
        for name, target in json.loads(links.read_text()).items():
            os.symlink(target.replace("{course}", str(course)), dest / name)


def scratch_course(root: Path) -> Path:
    """This checkout's tracked (and unignored) files, ``.venv`` linked."""
    course = root / "course"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        if (REPO / rel).is_file() and not rel.startswith("tests/redteam/"):
            (course / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, course / rel)
    (course / ".venv").symlink_to(REPO / ".venv")
    return course


def _text(path: Path) -> str:
    if not path.exists():
        return ""
    raw = re.sub(r"<(script|style)\b.*?</\1>", " ", path.read_text(errors="replace"), flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "\n", raw))


def _strings_about(obj, student: str, out: list, inside: bool = False) -> None:
    """String leaves of every dict or list in the report that names ``student``."""
    if isinstance(obj, dict):
        here = inside or student in obj.values() or student in obj
        for v in obj.values():
            _strings_about(v, student, out, here)
    elif isinstance(obj, list):
        here = inside or student in obj
        for v in obj:
            _strings_about(v, student, out, here)
    elif inside and isinstance(obj, str) and obj != student and len(obj) > 12:
        out.append(obj)


def grade(names: list[str], workdir: Path | None = None, jobs: int = 2, log=print) -> tuple[list[Row], dict]:
    """Grade ``names`` (variant folders) in one run; returns the rows and the run's facts
    (wall seconds, exit code, leftover processes, course path)."""
    cells = _release_cells()
    root = Path(workdir or tempfile.mkdtemp(prefix="redteam-"))
    course = scratch_course(root)
    incoming = root / "incoming"
    rows = []
    for name in names:
        a = assignment_of(name, cells)
        rows.append(Row(name, a, "honest" if name.startswith("honest_") else "attack", student_of(name)))
        hand_in(incoming, course, rows[-1].student, a, name)
    for a in sorted({r.assignment for r in rows}):
        hand_in(incoming, course, f"blank-{a}", a, None)

    cmd = [str(course / ".venv" / "bin" / "python"), "-m", "grader", "--submissions", str(incoming),
           "--course-root", str(course), "--jobs", str(jobs)]
    log(f"grading {len(names)} variants + blanks in {course}: {' '.join(cmd)}")
    start = time.monotonic()
    # run from this checkout: the venv's editable normref is this checkout's, which the sandboxes bind
    # (run in the scratch course, its copied normref would be found first; see REPORT.md)
    proc = subprocess.run(["nice", *cmd], cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - start
    (root / "grader.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    leftover = [line.strip() for line in ps.splitlines() if PROCESS_MARKER in line and "ps -eo" not in line]
    facts = {"wall_s": round(wall, 1), "rc": proc.returncode, "leftover": leftover, "course": str(course),
             "log": str(root / "grader.log"), "tail": (proc.stdout + proc.stderr)[-3000:]}

    points: dict[str, dict[str, tuple[float, float]]] = {}
    byq = course / "grades_by_question.csv"
    if byq.exists():
        with byq.open() as f:
            for rec in csv.DictReader(f):
                points.setdefault((rec.get("student_id") or rec.get("student")), {})[rec.get("grade_id") or
                                                                                    rec.get("question")] = rec
    report = {}
    if (course / "reports" / "report.json").exists():
        report = json.loads((course / "reports" / "report.json").read_text())

    def auto_points(student: str, assignment: str) -> tuple[float, float, dict]:
        got = possible = 0.0
        per = {}
        for gid, rec in points.get(student, {}).items():
            meta = cells.get(gid, (None, {}))[1]
            if cells.get(gid, (None,))[0] != assignment or not meta.get("grade") or meta.get("solution"):
                continue  # not this assignment's, or hand-graded
            score = float(rec.get("score") or rec.get("auto_score") or 0)
            top = float(rec.get("max_score") or meta.get("points") or 0)
            per[gid] = score
            got, possible = got + score, possible + top
        return got, possible, per

    blanks = {a: auto_points(f"blank-{a}", a)[0] for a in {r.assignment for r in rows}}
    review = re.compile(r"(for the instructor'?s review|0 points:|points taken|not graded|could not)", re.I)
    for r in rows:
        r.got, r.possible, r.per_cell = auto_points(r.student, r.assignment)
        r.blank = blanks[r.assignment]
        text = _text(course / "feedback" / r.student / r.assignment / f"{r.assignment}.html")
        r.feedback_lines = sorted({ln.strip()[:200] for ln in text.splitlines() if review.search(ln)})
        r.leaks = [m for m in LEAK_MARKERS if m in text]
        flags: list[str] = []
        _strings_about(report, r.student, flags)
        r.report_flags = sorted(set(flags))[:12]
        if r.possible == 0:
            r.verdict = (f"BREACH: the run failed (rc {proc.returncode}), nobody graded" if r.kind == "attack"
                         else f"NOT GRADED (run rc {proc.returncode})")
        elif r.kind == "honest":
            accused = [ln for ln in r.feedback_lines if "0 points:" in ln]
            full = r.possible > 0 and abs(r.got - r.possible) < 1e-9
            r.verdict = ("ok" if full and not accused else
                         "FALSE ACCUSATION" if accused else f"LOST {r.possible - r.got:g}")
            if r.verdict == "ok" and any("review" in ln.lower() for ln in r.feedback_lines):
                r.verdict = "ok (flagged for review)"
        else:
            held = r.got <= r.blank + 1e-9 and not r.leaks
            r.verdict = "held" if held else ("BREACH: leak" if r.leaks else f"BREACH: +{r.got - r.blank:g}")
            if r.variant == "leftover_process" and leftover:
                r.verdict = "BREACH: process left running"
    return rows, facts


def table(rows: list[Row]) -> str:
    head = "| variant | assignment | kind | got / possible / blank | feedback lines (points taken, review) | verdict |"
    out = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        lines = "; ".join(r.feedback_lines)[:300].replace("|", "\\|") or "-"
        out.append(f"| {r.variant} | {r.assignment} | {r.kind} | {r.got:g} / {r.possible:g} / {r.blank:g} | "
                   f"{lines} | {r.verdict} |")
    return "\n".join(out)


def runs(names: list[str]) -> list[list[str]]:
    """The variants graded together, then each ``solo`` one (a file ``solo`` in its folder says
    why) in a run of its own."""
    solo = [n for n in names if (HERE / n / "solo").exists()]
    together = [n for n in names if n not in solo]
    return ([together] if together else []) + [[n] for n in solo]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated variant names (default: all)")
    ap.add_argument("--workdir", type=Path, help="scratch folder (default: a new temporary one, kept)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the rows and run facts here")
    args = ap.parse_args(argv)
    names = variants(args.only.split(",") if args.only else None)
    rows, all_facts = [], []
    for i, group in enumerate(runs(names)):
        work = args.workdir / f"run{i}" if args.workdir else None
        if work:
            work.mkdir(parents=True)
        got, facts = grade(group, work, args.jobs, log=lambda s: print(s, file=sys.stderr))
        rows += got
        all_facts.append(facts)
    rows.sort(key=lambda r: (r.kind, r.variant))
    print(table(rows))
    held = sum(r.verdict == "held" for r in rows if r.kind == "attack")
    ok = sum(r.verdict.startswith("ok") for r in rows if r.kind == "honest")
    print(f"\nattacks held {held}/{sum(r.kind == 'attack' for r in rows)}, honest ok "
          f"{ok}/{sum(r.kind == 'honest' for r in rows)}")
    for facts in all_facts:
        print(f"run: {facts['wall_s']} s, rc {facts['rc']}, left running: {facts['leftover'] or 'none'}; "
              f"log {facts['log']}")
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows], "runs": all_facts}, indent=1))
    return 0 if all(f["rc"] == 0 for f in all_facts) else 1


if __name__ == "__main__":
    sys.exit(main())
