"""Reading any file a student sent as a notebook, leniently: the one reader of
:mod:`grader.intake.collect` (is this file a notebook at all?) and :mod:`grader.intake.repair` (repair it).
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import nbformat


def _decode(raw: bytes) -> tuple[str, str | None]:
    for enc in ("utf-8-sig", "utf-8"):
        try:
            return raw.decode(enc), None
        except UnicodeDecodeError:
            pass
    try:
        return raw.decode("cp1252"), "cp1252"
    except UnicodeDecodeError:
        return raw.decode("latin-1"), "latin-1"


def read_notebook_leniently(path: Path) -> tuple[nbformat.NotebookNode | None, list[str], str | None]:
    """``(notebook or None, notes, reason it is unreadable)`` for any file a student sent."""
    notes: list[str] = []
    raw = path.read_bytes()
    text, enc = _decode(raw)
    if enc:
        notes.append(f"{path.name} was not UTF-8; decoded as {enc}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = json.loads(text, strict=False)  # raw control characters inside strings
            notes.append(f"{path.name} had control characters inside JSON strings; accepted")
        except json.JSONDecodeError as e:
            return None, notes, f"{path.name} is not valid JSON ({e.msg} at line {e.lineno})"
    if not isinstance(data, dict) or "cells" not in data and "worksheets" not in data:
        return None, notes, f"{path.name} is JSON but not a Jupyter notebook"
    try:
        major = int(data.get("nbformat", 4))
        with warnings.catch_warnings():  # duplicate cell ids etc. are normalised, not fatal
            warnings.simplefilter("ignore")
            nb = nbformat.reads(json.dumps(data), as_version=4)
    except Exception as e:  # noqa: BLE001 - any failure here means "cannot be graded"
        return None, notes, f"{path.name} could not be read as a notebook ({type(e).__name__}: {e})"
    if major < 4:
        notes.append(f"{path.name} was nbformat {major}; converted to nbformat 4")
    try:
        nbformat.validator.normalize(nb)
    except Exception:  # noqa: BLE001
        pass
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.setdefault("outputs", [])
            cell.setdefault("execution_count", None)
        else:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
        cell.setdefault("metadata", {})
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
    return nb, notes, None


__all__ = ["read_notebook_leniently"]
