"""The course's bookkeeping under ``logs/`` (grader/ledger/store.py): one atomic writer, one rule for a
damaged record, one accessor per record.

A write is whole or not at all (an exception, a kill -9, two writers at once), a damaged record
(cut short, or not its shape) reads as nothing recorded, is moved aside (never written over) and
named in one line, and every other module goes through the store rather than writing ``logs/``
itself.
"""
import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.ledger import files, store
from grader.ledger.course import CourseTree

REPO = Path(__file__).resolve().parents[1]

#: Per record: a value of its shape (what a run writes), and bytes of the wrong shape.
SOUND = {
    store.GRADED: ([["rmsnorm", "ada"]], b'{"rmsnorm": "ada"}'),
    store.COLLECTED_BY: ({"ada/rmsnorm": "20261201T074512Z-1"}, b'["ada/rmsnorm"]'),
    store.UNREADABLE: ({"ada/rmsnorm": {"reason": "not JSON", "received": "ab"}}, b'{"ada/rmsnorm": "not JSON"}'),
    store.HANDGRADES: ([{"assignment": "practice", "student": "ada", "notebook": "practice",
                         "grade_id": "practice_shape_why", "manual_score": 1.0, "answer": "x",
                         "comment": None, "test": False}], b'[{"student": "ada"}]'),
    store.GRADED_HASHES: ({"ada/practice": {"hashes": ["ab"], "run": "r1"}}, b'{"ada/practice": "ab"}'),
    store.RECEIVED: ({"ada/rmsnorm": "ab"}, b'{"ada": "ab"}'),
    store.LMS_LATE: ({"ada/rmsnorm": True}, b'{"ada/rmsnorm": "yes"}'),
    store.LMS_FILES: ({"ada/rmsnorm": "ada_1_2_rmsnorm.ipynb"}, b'{"ada/rmsnorm": 7}'),
    store.GENERATED: ({"rmsnorm": {"inputs": "ab", "gradebook": None}}, b'{"rmsnorm": "ab"}'),
    store.CANARY: ({"key": "ab", "status": "passed"}, b'["ab"]'),
    store.FLAGS: ({"ada": {"": ["late"], "rmsnorm": ["tampering"]}}, b'{"ada": ["late"]}'),
    store.CLEANED: ({"runs": 2}, b'{"runs": "two"}'),
}


def test_every_record_has_a_sound_value_and_a_wrong_shape_here():
    assert sorted(SOUND) == sorted(store.RECORDS)
    for name, (value, wrong) in SOUND.items():
        assert store.RECORDS[name].shape(value) is None, name
        assert store.RECORDS[name].shape(json.loads(wrong)), name


# --------------------------------------------------------------------------- the writer

def test_atomic_path_writes_whole_and_leaves_no_part(tmp_path):
    path = tmp_path / "new" / "folder" / "grades.csv"
    with store.atomic_path(path) as part:
        assert part.parent == path.parent and part.name.startswith("grades.csv.") and part.suffix == ".part"
        assert not path.exists()  # nothing at its place until the block ends
        part.write_text("a,b\n")
    assert path.read_text() == "a,b\n"
    assert [p.name for p in path.parent.iterdir()] == ["grades.csv"]


@pytest.mark.parametrize("stop", [OSError(28, "No space left on device"), KeyboardInterrupt("SIGINT")])
def test_a_write_that_fails_leaves_the_earlier_file_and_no_part(tmp_path, stop):
    path = tmp_path / "roster.csv"
    path.write_text("earlier\n")
    with pytest.raises(type(stop)):
        with store.atomic_path(path) as part:
            part.write_text("half of the new")
            raise stop
    assert path.read_text() == "earlier\n"
    assert [p.name for p in tmp_path.iterdir()] == ["roster.csv"]


def test_atomic_dir_puts_a_folder_in_place_whole(tmp_path):
    dest = tmp_path / "replaced" / "ada" / "practice"
    with store.atomic_dir(dest) as part:
        (part / "practice.ipynb").write_text("{}")
    assert [p.name for p in dest.iterdir()] == ["practice.ipynb"]
    with pytest.raises(OSError):
        with store.atomic_dir(dest) as part:
            (part / "other.ipynb").write_text("{}")
            raise OSError(28, "No space left on device")
    assert [p.name for p in dest.iterdir()] == ["practice.ipynb"]  # the earlier one, as it was
    assert [p.name for p in dest.parent.iterdir()] == ["practice"]  # no part folder left


_WRITER = """
import sys
from grader.ledger import store
path, tag = sys.argv[1], sys.argv[2]
for i in range(10**9):
    store.write_json(path, {"writer": tag, "n": i, "pad": tag * 200_000})
"""


def test_killed_and_concurrent_writers_leave_one_whole_file(tmp_path):
    """Two processes rewrite one file as fast as they can; both are killed with SIGKILL at some
    point of their writes: the file is always one writer's whole JSON, never a mix or a half."""
    path = tmp_path / "address-space.json"
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), tag], cwd=REPO) for tag in "ab"]
    try:
        seen = set()
        deadline = time.monotonic() + 120
        while len(seen) < 2 and time.monotonic() < deadline:  # both have finished writes
            if path.exists():
                data = json.loads(path.read_text())
                assert data["pad"] == data["writer"] * 200_000
                seen.add(data["writer"])
    finally:
        for w in writers:
            w.send_signal(signal.SIGKILL)
            w.wait()
    assert seen == {"a", "b"}
    data = json.loads(path.read_text())
    assert data["pad"] == data["writer"] * 200_000 and data["n"] >= 0
    # a killed writer may leave its part: the next run's sweep removes those of logs/
    tree = CourseTree(tmp_path / "course")
    tree.logs.mkdir(parents=True)
    for p in tmp_path.glob("address-space.json.*.part"):
        p.rename(tree.logs / p.name)
    (tree.logs / "graded.json.123-0.part").write_text("[[")
    assert store.set_aside_damaged(tree) == []
    assert list(tree.logs.iterdir()) == []


# --------------------------------------------------------------------------- damaged records

@pytest.mark.parametrize("name", sorted(store.RECORDS))
@pytest.mark.parametrize("damage", ["cut short", "not UTF-8", "wrong shape"])
def test_a_damaged_record_reads_as_nothing_and_is_set_aside_never_written_over(tmp_path, name, damage):
    tree = CourseTree(tmp_path)
    tree.logs.mkdir()
    value, wrong = SOUND[name]
    text = json.dumps(value).encode()
    bad = {"cut short": text[: len(text) // 2], "not UTF-8": b"\xff\xfe" + text, "wrong shape": wrong}[damage]
    path = tree.logs / name
    path.write_bytes(bad)
    rec = store.RECORDS[name]
    assert store.load(tree, name) == rec.empty()  # read as nothing recorded, no crash
    assert path.read_bytes() == bad  # reading never moves anything
    said = store.set_aside_damaged(tree)
    assert len(said) == 1 and said[0].startswith(f"{path}: ")
    assert f"kept as {tree.logs / (name + '.damaged')}: {rec.without}; check it by hand" in said[0]
    assert (rec.shape(json.loads(bad)) if damage == "wrong shape" else "it could not be read (") in said[0]
    assert (tree.logs / (name + ".damaged")).read_bytes() == bad and not path.exists()
    assert store.set_aside_damaged(tree) == []  # said once
    # damaged again (another hand edit): a writer sets it aside first, says it, never over the first
    path.write_bytes(bad)
    lines = []
    store.save(tree, name, value, log=lines.append)
    assert len(lines) == 1 and f"kept as {tree.logs / (name + '.damaged.1')}" in lines[0]
    assert (tree.logs / (name + ".damaged")).read_bytes() == bad
    assert (tree.logs / (name + ".damaged.1")).read_bytes() == bad
    assert json.loads(path.read_text()) == value and store.load(tree, name) == value
    assert store.set_aside_damaged(tree) == []


def test_a_value_of_the_wrong_shape_is_never_written(tmp_path):
    tree = CourseTree(tmp_path)
    with pytest.raises(ValueError, match="not written to logs/graded.json"):
        store.save(tree, store.GRADED, {"rmsnorm": "ada"})
    assert not (tree.logs / store.GRADED).exists()


# --------------------------------------------------------------------------- the accessors

def test_records_written_before_the_store_read_as_they_were(tmp_path):
    """Existing course folders: the files the earlier writers left (no indent, ``.part`` names)."""
    tree = CourseTree(tmp_path)
    tree.logs.mkdir()
    (tree.logs / "graded.json").write_text('[["rmsnorm", "ada"], ["practice", "bo"]]')
    (tree.logs / "received.json").write_text('{\n "ada/rmsnorm": "ab"\n}')
    (tree.logs / "cleaned.json").write_text('{"runs": 1}\n')
    assert store.graded(tree) == {("rmsnorm", "ada"), ("practice", "bo")}
    assert store.received(tree) == {"ada/rmsnorm": "ab"}
    assert store.set_aside_damaged(tree) == []


def test_the_accessors_round_trip_and_merge(tmp_path):
    tree = CourseTree(tmp_path)
    assert store.graded(tree) is None  # no record: a course graded before it was kept
    store.write_graded(tree, {("rmsnorm", "ada"), ("practice", "ada")})
    assert json.loads((tree.logs / "graded.json").read_text()) == [["practice", "ada"], ["rmsnorm", "ada"]]
    store.write_graded(tree, set())
    assert store.graded(tree) == set()
    store.add_collected_by(tree, [("rmsnorm", "ada")], "r1")
    store.add_collected_by(tree, [("rmsnorm", "bo"), ("rmsnorm", "ada")], "r2")
    assert store.collected_by(tree) == {"ada/rmsnorm": "r2", "bo/rmsnorm": "r2"}
    store.add_received(tree, {"ada/rmsnorm": "ab"})
    store.add_received(tree, {"bo/rmsnorm": "cd"})
    assert store.received(tree) == {"ada/rmsnorm": "ab", "bo/rmsnorm": "cd"}
    store.add_lms_late(tree, {})  # an LMS batch with no late mark still leaves the record
    assert (tree.logs / "lms_late.json").is_file() and store.lms_late(tree) == {}
    grades = SOUND[store.HANDGRADES][0]
    store.write_hand_grades(tree, grades)
    assert store.hand_grades(tree) == grades
    store.write_hand_grades(tree, [])  # all written back: the record goes
    assert not (tree.logs / "handgrades.json").exists()
    assert store.key("rmsnorm", "ada") == "ada/rmsnorm" and store.pair("ada/rmsnorm") == ("rmsnorm", "ada")


def test_the_run_log_skips_a_line_cut_short_and_counts_from_the_last_clean(tmp_path):
    tree = CourseTree(tmp_path)
    store.append_run(tree, {"run_id": "r1", "status": "ok"})
    with (tree.logs / store.RUN_LOG).open("a") as f:
        f.write('{"run_id": "r2", "sta\n')  # a run killed while it wrote its line
    store.write_cleaned(tree)
    assert json.loads((tree.logs / "cleaned.json").read_text()) == {"runs": 2}
    store.append_run(tree, {"run_id": "r3", "status": "failed"})
    assert [r["run_id"] for r in store.read_runs(tree)] == ["r1", "r3"]
    assert store.runs_since_clean(tree) == [{"run_id": "r3", "status": "failed"}]
    (tree.logs / "cleaned.json").write_text("{")  # damaged: every line counts (the careful reading)
    assert store.runs_since_clean(tree) == [{"run_id": "r1", "status": "ok"}, None,
                                            {"run_id": "r3", "status": "failed"}]


def test_the_users_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(store.ENV_CANARY_CACHE, str(tmp_path / "cache"))
    assert store.cached("canary/ab.json") is None
    store.cache("canary/ab.json", {"key": "ab"})
    assert store.cached("canary/ab.json") == {"key": "ab"}
    (tmp_path / "cache" / "canary" / "ab.json").write_text("{")  # damaged: only a shortcut, made again
    assert store.cached("canary/ab.json") is None
    monkeypatch.setenv(store.ENV_CANARY_CACHE, "0")
    store.cache("canary/cd.json", {"key": "cd"})
    assert store.cached("canary/cd.json") is None and not (tmp_path / "cache" / "canary" / "cd.json").exists()


# --------------------------------------------------------------------------- one writer

#: The renames left outside the store, each with why: moves of what is already whole.
RENAMES_ELSEWHERE = {
    "grader/ledger/apps.py": "release/<assignment> swapped in from nbgrader's staging folder (the course's output)",
    "grader/ledger/reset.py": "restore --state moves the extracted archive's files into place",
}


def _renames(path: Path) -> list[int]:
    """Lines of ``os.replace``/``os.rename`` calls and ``Path.replace``/``Path.rename`` calls on a
    path-like receiver in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("replace", "rename"):
            recv = node.func.value
            if (isinstance(recv, ast.Name) and recv.id == "os") or (
                    len(node.args) == 1 and not node.keywords and not isinstance(recv, ast.Constant)
                    and not (isinstance(recv, ast.Name) and recv.id in ("s", "text", "name", "line"))):
                out.append(node.lineno)
    return out


def test_only_the_store_renames_files_into_place():
    found = {}
    for path in sorted((REPO / "grader").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        lines = _renames(path)
        if lines and rel != "grader/ledger/store.py":
            found[rel] = lines
    assert sorted(found) == sorted(RENAMES_ELSEWHERE), found


def test_no_module_but_the_store_names_a_record_file():
    """Callers use the store's accessors: no other module spells a record's file name."""
    names = set(store.RECORDS) | {store.RUN_LOG}
    spelled = {}
    for path in sorted((REPO / "grader").rglob("*.py")):
        if path.name == "store.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                spelled.setdefault(path.relative_to(REPO).as_posix(), []).append(node.value)
    assert spelled == {}


def test_the_kernel_launcher_can_import_the_store_by_path():
    """grader/kernel/sandbox.py runs by path (the kernelspec's argv, the zygote's sibling import): it
    imports the grader package's own modules from where it lies, the store for the user's cache
    among them, with nothing on the path but its folder."""
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'grader/kernel'); import sandbox; "
                          "from grader.ledger import store; print(sandbox.shared_cache_dir is store.user_cache_dir)"],
                         cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ""})
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-2000:]


def test_write_notebook_replaces_a_read_only_notebook_and_keeps_its_mode(tmp_path):
    """nbgrader leaves the notebooks it autogrades read-only (444); the grader's later stages write
    them again through the store's writer, which a user who is not root can do (the folder is
    theirs): the content is the new notebook's, the mode is the file's earlier mode."""
    import nbformat

    path = tmp_path / "a.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), path)
    path.chmod(0o444)
    files.write_notebook(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("2")]), path)
    assert nbformat.read(path, as_version=4).cells[0].source == "2"
    assert path.stat().st_mode & 0o777 == 0o444
    assert [p.name for p in tmp_path.iterdir()] == ["a.ipynb"]


def test_copy_plain_tree_copies_files_and_folders_and_never_a_link(tmp_path):
    """A handed-in tree with links to a course file, to nothing and to a folder above it (a loop):
    its files and folders are copied, no link is followed or copied, each is named; a submission
    folder that is itself a link (or one above it) brings nothing."""
    secret = tmp_path / "course" / "gradebook.db"
    secret.parent.mkdir()
    secret.write_text("every student's grades")
    src = tmp_path / "in" / "ada" / "rmsnorm"
    (src / "sub").mkdir(parents=True)
    (src / "rmsnorm.ipynb").write_text("{}")
    (src / "sub" / "notes.txt").write_text("mine")
    (src / "db").symlink_to(secret)
    (src / "gone").symlink_to(tmp_path / "nowhere")
    (src / "sub" / "loop").symlink_to(tmp_path / "in")
    os.mkfifo(src / "pipe")
    left = files.copy_plain_tree(src, tmp_path / "out", tmp_path / "in")
    assert left == ["db (a symbolic link)", "gone (a symbolic link)", "pipe (not a regular file)",
                    "sub/loop (a symbolic link)"]
    got = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*"))
    assert got == ["rmsnorm.ipynb", "sub", "sub/notes.txt"]
    (tmp_path / "in" / "eve").symlink_to(tmp_path / "in" / "ada")
    assert files.copy_plain_tree(tmp_path / "in" / "eve" / "rmsnorm", tmp_path / "out2", tmp_path / "in") == [
        "eve/rmsnorm (a symbolic link, not followed)"]
    assert list((tmp_path / "out2").iterdir()) == []
