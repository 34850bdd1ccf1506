"""The in-process nbgrader apps (grader.ledger.apps) do what the `nbgrader` commands do."""
import sqlite3
import subprocess
import sys

import pytest

from grader.ledger.apps import AppError, Course


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _nbgrader(root, *args):
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=root, check=True,
                          capture_output=True, text=True)


@pytest.mark.slow
def test_generate_due_date_and_export_match_the_commands(course_copy, tmp_path):
    committed = _files(course_copy / "release")  # made by `nbgrader generate_assignment` (test_release)
    course = Course(course_copy)
    for a in sorted(p.name for p in (course_copy / "source").iterdir() if p.is_dir()):
        course.generate_assignment(a)
    assert _files(course_copy / "release") == committed
    with sqlite3.connect(course_copy / "gradebook.db") as db:
        cells = db.execute("select count(*) from grade_cells").fetchone()[0]
    assert cells >= 10  # the grade cells are recorded, which autograde needs

    course.set_due_date("rmsnorm", "2026-11-21 09:00:00 UTC")
    course.export_csv(course_copy / "ours.csv")
    _nbgrader(course_copy, "export", "--to", "theirs.csv")
    ours = (course_copy / "ours.csv").read_text()
    assert ours == (course_copy / "theirs.csv").read_text()
    # the due date nbgrader's own `db assignment add` would have written
    other = tmp_path / "other"
    other.mkdir()
    for name in ("nbgrader_config.py",):
        (other / name).write_bytes((course_copy / name).read_bytes())
    _nbgrader(other, "db", "assignment", "add", "rmsnorm", "--duedate=2026-11-21 09:00:00 UTC")
    with sqlite3.connect(course_copy / "gradebook.db") as a, sqlite3.connect(other / "gradebook.db") as b:
        q = "select duedate from assignment where name='rmsnorm'"
        assert a.execute(q).fetchone() == b.execute(q).fetchone() == ("2026-11-21 09:00:00.000000",)


def test_a_failing_app_raises_with_its_log(course_copy):
    with pytest.raises(AppError, match="generate_assignment no_such_assignment"):
        Course(course_copy).generate_assignment("no_such_assignment")
    with pytest.raises(FileNotFoundError, match="nbgrader_config.py"):
        Course(course_copy / "source")


def test_a_new_gradebook_is_created_in_process_with_nbgraders_alembic_head(course_copy, tmp_path, monkeypatch):
    """nbgrader stamps a new gradebook with what `alembic heads` prints, run as a subprocess
    (1.5-4 s each); the grader creates it in process first, with the same tables and stamp."""
    from nbgrader.api import Gradebook, get_alembic_version

    from grader.ledger.course import put_interpreter_on_path

    put_interpreter_on_path()  # nbgrader's own way needs `alembic` on PATH
    heads = get_alembic_version()  # `alembic heads`, as nbgrader runs it
    with Gradebook(f"sqlite:///{tmp_path / 'nbgrader.db'}"):  # a gradebook nbgrader made itself
        pass

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"a subprocess was started: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    course = Course(course_copy)
    course.generate_assignment("layernorm")
    course.set_due_date("layernorm", "2026-11-21 09:00:00 UTC")
    monkeypatch.undo()
    schema = "select type, name, tbl_name, sql from sqlite_master order by name"
    with sqlite3.connect(course_copy / "gradebook.db") as ours, sqlite3.connect(tmp_path / "nbgrader.db") as theirs:
        assert ours.execute("select version_num from alembic_version").fetchall() == [(heads,)]
        assert ours.execute("select name from assignment").fetchall() == [("layernorm",)]
        assert ours.execute(schema).fetchall() == theirs.execute(schema).fetchall()


def test_generate_is_skipped_only_when_nothing_it_reads_or_writes_changed(course_copy, monkeypatch):
    """The generate stage skips an assignment whose source/, release/ and nbgrader_config.py are
    as the generate that left the gradebook as it is found them; any change, a new or restored
    gradebook, or a cleaned course generates again. The run's log says which and why."""
    import shutil

    import nbformat

    from grader import pipeline
    from grader.batch import Services
    from grader.ledger.course import CourseTree
    from grader.options import GradeOptions

    tree = CourseTree(course_copy)
    lines: list[str] = []

    def stage():
        lines.clear()
        b = pipeline.Batch(options=GradeOptions(course_root=course_copy, jobs=1, fresh=False, use_sandbox=False),
                           services=Services(tree=tree, log=lines.append, run_id="test", command="test", jobs=1),
                           run=pipeline.GradeRun(course_root=course_copy, assignments=["layernorm"]))
        pipeline.generate(b)
        assert lines[0] == "generate: layernorm"
        return lines[1:]

    generated = []
    real = Course.generate_assignment
    monkeypatch.setattr(Course, "generate_assignment",
                        lambda self, a, keep=None: (generated.append(a), real(self, a, keep))[1])
    assert stage() == [] and generated == ["layernorm"]  # a new gradebook: generated
    release = _files(course_copy / "release" / "layernorm")
    (skip,) = stage()
    assert generated == ["layernorm"], "generated again though nothing changed"
    assert skip.startswith("generate: layernorm skipped: source/layernorm, release/layernorm and "
                           "nbgrader_config.py are unchanged") and "logs/generated.json" in skip
    assert _files(course_copy / "release" / "layernorm") == release
    shutil.copy(course_copy / "gradebook.db", course_copy / "before-change.db")

    src = course_copy / "source" / "layernorm" / "layernorm.ipynb"
    nb = nbformat.read(src, as_version=4)
    locked = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("locked") and c.cell_type == "code")
    locked.source += "\n# changed"  # a locked cell: its source and checksum are in the gradebook
    nbformat.write(nb, src)
    stale = ("generate: release/layernorm was stale and has been regenerated from source/layernorm (it held "
             "no work: every cell as nbgrader generated it)")
    assert stage() == [stale] and generated == ["layernorm"] * 2
    assert "# changed" in (course_copy / "release" / "layernorm" / "layernorm.ipynb").read_text()
    assert len(stage()) == 1 and len(generated) == 2
    # the gradebook from before that change put back (a restore): its cells are the old ones
    shutil.copy(course_copy / "before-change.db", course_copy / "gradebook.db")
    assert stage() == [] and len(generated) == 3
    (course_copy / "release" / "layernorm" / "layernorm.ipynb").write_text(src.read_text())  # release/ edited
    (kept,) = stage()  # what was written there is kept (tests/test_release_work.py), then generated again
    assert kept.startswith("generate: release/layernorm held work written in it (layernorm.ipynb: answer cell ")
    assert "moved to logs/release-kept/" in kept and len(generated) == 4
    with open(course_copy / "nbgrader_config.py", "a") as f:
        f.write("\n# a comment\n")
    assert stage() == [] and len(generated) == 5
    (course_copy / "gradebook.db").unlink()  # a new gradebook
    assert stage() == [] and len(generated) == 6
    pipeline.clean(course_copy)  # a cleaned course: logs/generated.json is gone with the gradebook
    assert not (course_copy / "logs" / "generated.json").exists()
    assert stage() == [] and len(generated) == 7
    assert len(stage()) == 1 and len(generated) == 7
