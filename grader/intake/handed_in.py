"""Start-up files and shadowing modules handed in beside a notebook, and what each actually did.

A submission's folder can hold files the grading kernel would run or import were it an ordinary
Python: a start-up file (``sitecustomize.py``, ``usercustomize.py``, a ``*.pth``, an IPython
configuration or profile start-up script) or a module named like one the kernel imports (a
``torch.py``, a ``normref/`` package). The grading kernel loads none of them on its own (the
sandbox's home, profile and user site are its own; the student's folder is searched last for
modules, :mod:`grader.kernel.kernel_guard`), but the student's code can: ``%run sitecustomize.py``,
``exec(open('usercustomize.py').read())``, ``import sitecustomize``, a ``sys.path`` of its own.

So the class report says, for each such file, what the evidence shows, not what the mechanism
would suggest: the kernel's record of every code file of the folder a cell opened and every
module a cell imported from it (:data:`grader.kernel.kernel_guard.RECORD_MIME`, an output of that cell in
the autograded notebook), with the line of that cell that names the file. Without the sandbox
there is no record, and the report says what the notebook's code names instead. The record is
kept by the kernel the student's code runs in: code that takes pains to hide can leave itself
out of it (it describes, it does not score).
"""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from ..kernel.kernel_guard import RECORD_MIME, STARTUP_NAMES


@dataclass(frozen=True)
class HandedIn:
    """One file (or package) of a submission's folder.

    Attributes:
        path: relative to the folder (``"torch.py"``, ``"normref/"``, ``".ipython/profile_default/startup/a.py"``).
        kind: ``"startup"`` (a Python start-up file), ``"profile"`` (part of an IPython profile),
            ``"installed"`` or ``"standard-library"`` (named like such a module: it would shadow it).
        module: the module name an ``import`` would give it (None for a profile's files).
    """

    path: str
    kind: str
    module: str | None

    @property
    def startup(self) -> bool:
        """A start-up file (or a profile's), rather than a module that would shadow another."""
        return self.kind in ("startup", "profile")

    @property
    def what(self) -> str:
        """What it is, as a phrase: ``"a Python start-up file"``, ``"named like the installed
        module 'torch'"`` ..."""
        if self.kind == "startup":
            return "a Python start-up file"
        if self.kind == "profile":
            return "part of an IPython profile (start-up scripts, configuration)"
        return f"named like the {self.kind} module {self.module!r}"


def handed_in(folder: Path, limit: int = 20) -> list[HandedIn]:
    """The start-up files and shadowing modules in ``folder`` (``submitted/<student>/<assignment>/``),
    at most ``limit`` of each kind; start-up files first, each kind sorted by path."""
    folder = Path(folder)
    out: list[HandedIn] = []
    for p in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if not p.is_file() or p.is_symlink():
            continue
        rel = p.relative_to(folder)
        if p.name in STARTUP_NAMES or p.suffix == ".pth":
            out.append(HandedIn(str(rel), "startup", p.stem if len(rel.parts) == 1 else None))
        elif any(part == ".ipython" or part.startswith("profile_") for part in rel.parts[:-1]):
            out.append(HandedIn(str(rel), "profile", None))
        if len(out) >= limit:
            break
    shadows = 0
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        if p.is_file() and p.suffix in (".py", ".pyc", ".so", ".pyd") and p.name not in STARTUP_NAMES:
            name, shown = p.name.split(".")[0], p.name
        elif p.is_dir() and (p / "__init__.py").is_file():
            name, shown = p.name, f"{p.name}/"
        else:
            continue
        where = _installed(name, folder) if name.isidentifier() else None
        if where and shadows < limit:
            shadows += 1
            out.append(HandedIn(shown, where, name))
    return out


def _installed(name: str, folder: Path) -> str | None:
    """``"standard-library"`` or ``"installed"`` when ``name`` is a module the grading kernel can
    import from outside ``folder``; else None."""
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return "standard-library"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None) or ""
    inside = spec is not None and str(Path(folder).resolve()) in str(Path(origin).resolve())
    return "installed" if spec is not None and not inside else None


def kernel_records(autograded: Path) -> list[tuple[str, dict, str]]:
    """``(cell, record, cell source)`` for every record the grading kernels left in the autograded
    notebooks of ``autograded`` (``autograded/<student>/<assignment>/``): ``cell`` is ``"cell
    '<grade_id>'"`` or ``"a cell the student added"``."""
    import nbformat

    out = []
    for nb_path in sorted(Path(autograded).glob("*.ipynb")):
        try:
            nb = nbformat.read(nb_path, as_version=4)
        except Exception:  # noqa: BLE001 - an unreadable notebook is reported elsewhere
            continue
        for cell in nb.cells:
            for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
                record = o.get("data", {}).get(RECORD_MIME) if o.get("output_type") == "display_data" else None
                if isinstance(record, dict):
                    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                    out.append((f"cell {gid!r}" if gid else "a cell the student added", record, cell.source))
    return out


def _line_naming(source: str, h: HandedIn) -> str | None:
    """The first line of ``source`` that names ``h`` (its file name, or its module), shortened."""
    names = [Path(h.path.rstrip("/")).name] + ([h.module] if h.module else [])
    for line in source.splitlines():
        if any(n and n in line for n in names):
            line = line.strip()
            return line if len(line) <= 70 else line[:67] + "..."
    return None


def _evidence(h: HandedIn, records: list[tuple[str, dict, str]]) -> list[str]:
    """What the kernel's records show the student's code did with ``h``, one phrase per cell."""
    path = h.path.rstrip("/")
    said = []
    for cell, record, source in records:
        def mine(f) -> bool:
            return isinstance(f, str) and (f == path or f.startswith(path + "/"))

        modules = [m for m, f in (record.get("imported") or {}).items() if mine(f)]
        opened = [f for f in record.get("opened") or [] if mine(f)]
        if not modules and not opened:
            continue
        line = _line_naming(source, h)
        how = (f"imported it as module {modules[0]!r} from the student's folder" if modules
               else "opened it (as `%run`, `exec(open(...).read())` or an import do)")
        said.append(f"{cell} {how}" + (f" (`{line}`)" if line else ""))
    return said


def describe(folder: Path, autograded: Path | None, sandboxed: bool) -> list[str]:
    """The report's line for each start-up file and shadowing module of ``folder`` (the submission
    as handed in), from the grading kernel's record in ``autograded`` (its autograded notebooks;
    None when the submission was not autograded) and, without the sandbox, the notebook's code.

    E.g. ``"usercustomize.py (a Python start-up file, handed in beside the notebook): the grading
    kernel does not load start-up files; the student's own code ran it: cell 'rms_norm_impl'
    opened it (...)"``, or ``"torch.py (named like the installed module 'torch'): never imported
    or opened: the grading kernel imports the installed 'torch' ..."``.
    """
    files = handed_in(folder)
    if not files:
        return []
    records = kernel_records(autograded) if autograded is not None else []
    out = []
    for h in files:
        head = f"{h.path} ({h.what}, handed in beside the notebook)"
        mechanism = ("the grading kernel does not load start-up files (its home, IPython profile and user site are "
                     "the sandbox's own)" if h.startup else
                     f"the grading kernel searches the student's folder last, so `import {h.module}` gets the "
                     f"{h.kind} one")
        if autograded is None:
            out.append(f"{head}: not run: the notebook was not graded")
        elif not sandboxed:
            out.append(f"{head}: graded WITHOUT the sandbox, which records nothing: whether it ran or was imported "
                       f"is unknown; {_code_mentions(autograded, h)}")
        elif said := _evidence(h, records):
            out.append(f"{head}: {mechanism}, but the student's own code "
                       f"{'ran' if h.startup else 'loaded'} it: {'; '.join(said)}")
        else:
            out.append(f"{head}: never run or imported: {mechanism}, and no cell opened or imported it "
                       "(the grading kernel's record)")
    return out


def _code_mentions(autograded: Path, h: HandedIn) -> str:
    """Which cells of the notebook name ``h`` (the notebook's code, when no record was kept)."""
    import nbformat

    cells = []
    for nb_path in sorted(Path(autograded).glob("*.ipynb")):
        try:
            nb = nbformat.read(nb_path, as_version=4)
        except Exception:  # noqa: BLE001
            continue
        for cell in nb.cells:
            line = _line_naming(cell.source, h) if cell.cell_type == "code" else None
            if line:
                gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                cells.append(f"{f'cell {gid!r}' if gid else 'a cell the student added'} names it (`{line}`)")
    return "; ".join(cells) if cells else "no cell names it"


__all__ = ["HandedIn", "handed_in", "describe", "kernel_records", "STARTUP_NAMES"]
