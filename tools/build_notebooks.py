"""Build the lesson notebooks ``notebooks/NN_name.ipynb`` from their MyST Markdown sources
``notebooks/NN_name.md``.

The ``.md`` file is the lesson: open it in JupyterLab (``make lab-instructor`` opens ``.md``
files as notebooks, through jupytext), edit and run it there, then

    make notebooks          # or: .venv/bin/python tools/build_notebooks.py [NN_name.md ...]

and commit both files. The ``.ipynb`` is what students open: the same cells, converted by
jupytext (https://jupytext.readthedocs.io, MyST format), with

- no outputs and no execution counts (a test fails on committed outputs);
- fixed cell ids ``<stem>-<nn>``, so a rebuild changes nothing that was not edited;
- every cell's metadata as written in the ``.md`` (jupytext keeps it: ``+++ {...}`` before a
  Markdown cell, ``:key: value`` options in a ``{code-cell}``), nbgrader's included;
- notebook metadata: the ``python3`` kernel (the one ``ipykernel`` installs, so JupyterLab starts
  it without asking), and ``lesson_source``, the marker that names the ``.md`` to edit; the
  first Markdown cell says the same in an HTML comment, which students do not see.

``tests/test_notebooks.py`` fails when a committed notebook differs from what this builds.
"""
from __future__ import annotations

import sys
from pathlib import Path

import jupytext
import nbformat

REPO = Path(__file__).resolve().parents[1]
LESSONS = REPO / "notebooks"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def marker(source: Path) -> str:
    """The first line of a generated notebook's first Markdown cell (an HTML comment)."""
    return f"<!-- Generated from {source.name} by `make notebooks`: edit {source.name}, not this notebook. -->"


def sources() -> list[Path]:
    """Every lesson source, ``notebooks/NN_*.md``, in course order."""
    return sorted(LESSONS.glob("[0-9][0-9]_*.md"))


def build(source: Path) -> nbformat.NotebookNode:
    """The lesson notebook for the MyST Markdown file ``source``.

    Args:
        source: a ``notebooks/NN_name.md`` file in jupytext's MyST format.

    Returns:
        An nbformat 4.5 notebook, validated: the ``.md``'s cells and cell metadata, no outputs,
        ids ``<stem>-<nn>``, and the marker above.

    Raises:
        ValueError: ``source`` holds no Markdown cell (a lesson opens with its title).
    """
    source = Path(source)
    text = jupytext.read(source, fmt="md:myst")
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": dict(KERNELSPEC),
        "language_info": {"name": "python"},
        "lesson_source": {"path": f"notebooks/{source.name}", "build": "make notebooks",
                          "note": f"Generated from {source.name}: edit that file, then run make notebooks."},
    }
    markdown_seen = False
    for i, cell in enumerate(text.cells):
        if cell.cell_type == "markdown":
            new = nbformat.v4.new_markdown_cell(cell.source, metadata=dict(cell.metadata))
            if not markdown_seen:
                new.source = f"{marker(source)}\n{cell.source}"
                markdown_seen = True
        elif cell.cell_type == "code":
            new = nbformat.v4.new_code_cell(cell.source, metadata=dict(cell.metadata))
        else:
            new = nbformat.v4.new_raw_cell(cell.source, metadata=dict(cell.metadata))
        new.id = f"{source.stem}-{i:02d}"
        nb.cells.append(new)
    if not markdown_seen:
        raise ValueError(f"{source}: a lesson needs at least one Markdown cell (its title)")
    nbformat.validate(nb)
    return nb


def main(argv: list[str]) -> int:
    paths = [LESSONS / Path(a).name for a in argv] if argv else sources()
    missing = [p for p in paths if not p.is_file()]
    if missing:
        print(f"no such lesson source: {', '.join(str(p.relative_to(REPO)) for p in missing)}", file=sys.stderr)
        return 2
    for path in paths:
        out = path.with_suffix(".ipynb")
        nbformat.write(build(path), out)
        print(f"{path.relative_to(REPO)} -> {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
