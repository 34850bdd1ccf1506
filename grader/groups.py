"""Groups of wrong answers: submissions whose wrong outputs agree on a checker's battery.

For each student, the autograded notebooks' code cells (the answers as graded, after repair
and the tamper scan) run once more in a grading kernel (the sandbox of :mod:`grader.sandbox`
when bubblewrap works, through nbclient; one kernel per student, its namespace reset between
assignments), followed by a cell that calls :func:`normref.diagnosis.record.record_json` with
the same checker calls the assignment's test cells make (read from those cells). The record
holds the student's output on every battery case. Submissions of one checker whose outputs
agree on every case within twice the checker's tolerance (:func:`normref.diagnosis.record.agree`)
form a group, named or not: the group carries the checker's diagnosis of its first member
(a known fault kind, a variant found by :mod:`normref.diagnosis`, or what was measured), one
representative answer cell and who is in it.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from normref.diagnosis.record import MARKER, agree, call_key

__all__ = ["Group", "CheckCall", "check_calls", "answer_source", "records_notebook", "collect_records",
           "group_records", "mistake_groups"]

_CALL = re.compile(r"\b(check_[a-z_]+)\(\s*([A-Za-z_]\w*)\s*((?:,\s*[^()\n]*?)?)\)")
CELL_TIMEOUT_S = 60


@dataclass(frozen=True)
class CheckCall:
    """One checker call of an assignment's test cells: ``check(obj, *args)``."""

    check: str  # e.g. "check_layer_norm"
    obj: str  # the student's name it is called on, e.g. "layer_norm"
    args: tuple = ()

    @property
    def key(self) -> str:
        return call_key(self.check, self.args)


def _nbg(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def check_calls(nb) -> list[CheckCall]:
    """The code checkers the test cells of ``nb`` call, each once, in order.

    Only calls with literal extra arguments (``check_layer_norm(layer_norm, "numpy")``) and
    without keyword arguments (the quick self-checks) count.
    """
    from normref.diagnosis.coverage import CHECKERS

    known = {fn for fn, _ in CHECKERS.values()}
    out: list[CheckCall] = []
    for cell in nb.cells:
        if cell.cell_type != "code" or not _nbg(cell).get("grade") or _nbg(cell).get("solution"):
            continue
        for fn, obj, rest in _CALL.findall(cell.source):
            if fn not in known or "=" in rest:
                continue
            try:
                args = tuple(ast.literal_eval(f"({rest.lstrip(', ')},)")) if rest.strip(", ") else ()
            except (ValueError, SyntaxError):
                continue
            call = CheckCall(fn, obj, args)
            if call not in out:
                out.append(call)
    return out


def answer_source(nb, name: str) -> str:
    """The source of the answer cell that defines ``name`` (``def name`` / ``class name``), or ""."""
    pat = re.compile(rf"^\s*(def|class)\s+{re.escape(name)}\b", re.M)
    for cell in nb.cells:
        if cell.cell_type == "code" and _nbg(cell).get("solution") and pat.search(cell.source):
            return cell.source
    return ""


def _imports_only(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body)


def _answer_or_setup(cell) -> bool:
    """The cells the answers need: answer cells, cells the student inserted (no nbgrader
    metadata: a helper they wrote), and locked cells that only import. Test cells and lesson
    cells (plots, experiments) are left out."""
    meta = _nbg(cell)
    if meta.get("grade"):
        return False
    return bool(meta.get("solution")) or not meta or _imports_only(cell.source)


def records_notebook(notebooks: dict[str, nbformat.NotebookNode]) -> tuple[nbformat.NotebookNode, list[str]]:
    """One notebook that runs each assignment's answer and setup cells (:func:`_answer_or_setup`), then prints
    its record, then resets the namespace. Returns it and the assignments in order (one record
    cell each)."""
    nb = nbformat.v4.new_notebook()
    order: list[str] = []
    for a, src in notebooks.items():
        calls = check_calls(src)
        if not calls:
            continue
        for cell in src.cells:
            if cell.cell_type == "code" and _answer_or_setup(cell):
                nb.cells.append(nbformat.v4.new_code_cell(cell.source))
        items = ", ".join(f"({c.check!r}, globals().get({c.obj!r}), {c.args!r})" for c in calls)
        nb.cells.append(nbformat.v4.new_code_cell(
            "from normref.diagnosis.record import record_json as _normref_record_json\n"
            f"print(_normref_record_json([{items}]))", metadata={"normref_record": a}))
        nb.cells.append(nbformat.v4.new_code_cell("%reset -f"))
        order.append(a)
    return nb, order


def _parse(nb) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for cell in nb.cells:
        a = cell.get("metadata", {}).get("normref_record")
        if not a:
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                for line in str(o.get("text", "")).splitlines():
                    if line.startswith(MARKER):
                        try:
                            out[a] = json.loads(line[len(MARKER):])
                        except ValueError:
                            pass
    return out


def _run_student(job) -> tuple[str, dict[str, dict], str]:
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager
    from nbclient import NotebookClient

    student, folder, notebooks, kernel = job
    nb, order = records_notebook(notebooks)
    if not order:
        return student, {}, ""
    ksm = KernelSpecManager()
    env = dict(os.environ, NBGRADER_EXECUTION="autograde")  # lesson cells skip their plots, as in autograde
    km_kwargs = {}
    if kernel is not None:
        args, extra_env = kernel
        env.update(extra_env)
        ksm = KernelSpecManager(kernel_dirs=[p + "/kernels" for p in extra_env["JUPYTER_PATH"].split(os.pathsep) if p])
        opts = dict(a.lstrip("-").split("=", 1) for a in args)
        km_kwargs = {"transport": opts.get("KernelManager.transport", "tcp"),
                     "ip": opts.get("KernelManager.ip", "127.0.0.1")}
        name = opts.get("Execute.kernel_name", "python3")
    else:
        name = "python3"
    km = KernelManager(kernel_name=name, kernel_spec_manager=ksm, **km_kwargs)
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, allow_errors=True, interrupt_on_timeout=True,
                            resources={"metadata": {"path": str(folder)}},
                            extra_arguments=["--IPKernelApp.log_level=ERROR"])
    why = ""
    try:
        client.execute(env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except Exception as e:  # noqa: BLE001 - one student's kernel never stops the report
        why = f"{type(e).__name__}: {e}"[:300]
    return student, _parse(nb), why


def collect_records(course_root: Path, assignments: list[str], students: list[str], *, jobs: int = 1,
                    sandboxed: bool | None = None) -> tuple[dict[tuple[str, str], dict], dict[str, str]]:
    """Every student's checker records, from their autograded notebooks run once more.

    Args:
        course_root: the course (``autograded/<student>/<assignment>/*.ipynb``).
        sandboxed: run in the grading sandbox (default: when bubblewrap works here).

    Returns:
        ``({(assignment, student): {check: record}}, {student: why its kernel failed})``.
    """
    from . import sandbox

    course_root = Path(course_root)
    if sandboxed is None:
        sandboxed = sandbox.available()
    jobs_in: list = []
    for s in students:
        nbs = {}
        for a in assignments:
            for p in sorted((course_root / "autograded" / s / a).glob("*.ipynb")):
                try:
                    nbs[a] = nbformat.read(p, as_version=4)
                except Exception:  # noqa: BLE001 - an unreadable notebook has no record
                    pass
        if any(check_calls(nb) for nb in nbs.values()):
            jobs_in.append([s, course_root / "autograded" / s, nbs, None])
    records: dict[tuple[str, str], dict] = {}
    failed: dict[str, str] = {}
    if not jobs_in:
        return records, failed
    session = sandbox.SandboxSession(course_root) if sandboxed else None
    try:
        if session is not None:
            session.__enter__()
            for i, job in enumerate(jobs_in):
                job[3] = session.worker(i % max(1, jobs))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for student, recs, why in pool.map(_run_student, [tuple(j) for j in jobs_in]):
                for a, rec in recs.items():
                    records[(a, student)] = rec
                if why:
                    failed[student] = why
    finally:
        if session is not None:
            session.__exit__(None, None, None)
    return records, failed


@dataclass
class Group:
    """Submissions of one assignment whose wrong outputs agree on one checker's battery.

    Attributes:
        assignment, check: where (``check`` is the call, e.g. ``check_layer_norm, 'numpy'``).
        checker: the checker's name (``CheckResult.name``).
        students: who is in it, sorted.
        representative: whose answer cell is shown (the first in sorted order).
        diagnosis: the checker's words for the representative: each distinct hint of its failing
            cases (case name and error sizes removed), joined by " / ".
        faults: the fault kinds of the representative's failing cases.
        variant: the ``[variant: ...]`` id when the search named one, else None.
        cell: the representative's answer cell.
        failed: cases failed, of ``cases`` (the graded ones and the diagnostic probes of
            :mod:`normref.diagnosis.probes`).
        probe_only: every graded case passed; only a diagnostic probe failed (no points lost).
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
    probe_only: bool = False

    @property
    def size(self) -> int:
        return len(self.students)

    @property
    def group_id(self) -> str:
        """A stable id for links and filters: ``<assignment>-<check>-<n>`` is set by the caller."""
        return getattr(self, "_id", "")

    def to_json(self) -> dict:
        return {"assignment": self.assignment, "check": self.check, "checker": self.checker,
                "size": self.size, "students": self.students, "representative": self.representative,
                "diagnosis": self.diagnosis, "faults": self.faults, "variant": self.variant,
                "cell": self.cell, "failed": self.failed, "cases": self.cases, "id": self.group_id,
                "probe_only": self.probe_only}


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
    """Group the wrong records of one checker (``{student: record}``), largest group first.

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
                      cell=(cells or {}).get(s, ""), failed=len(bad), cases=len(cases),
                      probe_only=all(c.get("probe") for c in bad))
            groups.append((rec, g))
    out = sorted((g for _, g in groups), key=lambda g: (-g.size, g.representative))
    for i, g in enumerate(out, 1):
        g._id = f"{assignment}-{re.sub(r'[^a-z0-9]+', '-', g.checker.lower()).strip('-')}-{i}"
    return out


def mistake_groups(course_root: Path, assignments: list[str], students: list[str], *, jobs: int = 1,
                   sandboxed: bool | None = None) -> tuple[dict[str, list[Group]], dict[str, str]]:
    """The groups of wrong answers of every assignment (see the module docstring).

    Returns:
        ``({assignment: [Group, ...] largest first}, {student: why their records are missing})``.
    """
    course_root = Path(course_root)
    records, failed = collect_records(course_root, assignments, students, jobs=jobs, sandboxed=sandboxed)
    out: dict[str, list[Group]] = {}
    for a in assignments:
        by_check: dict[str, dict[str, dict]] = {}
        for (a2, s), recs in records.items():
            if a2 != a:
                continue
            for check, rec in recs.items():
                if "cases" in rec:
                    by_check.setdefault(check, {})[s] = rec
        groups: list[Group] = []
        for check, recs in by_check.items():
            cells: dict[str, str] = {}
            for s in recs:
                for p in sorted((course_root / "autograded" / s / a).glob("*.ipynb")):
                    nb = nbformat.read(p, as_version=4)
                    call = next((c for c in check_calls(nb) if c.key == check), None)
                    if call is not None:
                        cells[s] = answer_source(nb, call.obj)
            groups += group_records(a, check, recs, cells)
        groups.sort(key=lambda g: (-g.size, g.checker, g.representative))
        if groups:
            out[a] = groups
    return out, failed
