"""The hostile and broken corpus, graded by the real pipeline (`make grade`'s grade_class).

The module's three corpora (the issue's list of hostile and broken submissions, issue 14's
forgeries and caps, the red team's routes) are graded together, once, by one sandboxed run (the
``graded`` fixture); each test checks its own corpus.

A two-question assignment ("hostile": q1 = the seed's RMSNorm, 1 + 4 points; q2 = mean and
variance of (2, 2, 4, 4), 2 points) is added to a throwaway course; each student below is one
case of the issue's list. Every expected score is what the student's *honest* work earns:
q1 correct = 5, q1 with n-1 = 0 (the n-1 answer fails every case), q2 correct = 2.
"""
import copy
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell

from grader import grade_class
from grader.demo.answer_bank import ANSWERS
from grader.kernel.sandbox import available as sandbox_available
from normref.handback_files import HANDBACK_ENV as ENV
from normref.rules import REVIEW_PREFIX

REPO = Path(__file__).resolve().parents[1]
RMS_CORRECT = ANSWERS["rmsnorm"]["correct"]["rms_norm_impl"]
RMS_N_MINUS_1 = ANSWERS["rmsnorm"]["unbiased_variance"]["rms_norm_impl"]
MEAN_VAR = "def mean_var(x):\n    return float(x.mean()), float(((x - x.mean()) ** 2).mean())"


def _meta(grade_id, **kw):
    m = {"grade": False, "solution": False, "locked": True, "grade_id": grade_id, "schema_version": 3,
         "task": False}
    m.update(kw)
    return {"nbgrader": m}


def make_hostile_assignment(root):
    nb = nbformat.read(root / "source" / "rmsnorm" / "rmsnorm.ipynb", as_version=4)
    nb.cells[1].source = "import numpy as np\n" + nb.cells[1].source
    nb.cells += [
        new_markdown_cell("## Question 2: mean and variance of one token", metadata=_meta("mean_var_intro")),
        new_code_cell('def mean_var(x):\n    """(mean, biased variance) of a 1-D array."""\n'
                      '    ### BEGIN SOLUTION\n    return float(x.mean()), float(x.var())\n    ### END SOLUTION',
                      metadata=_meta("mean_var_impl", solution=True, locked=False)),
        new_code_cell('"""mean_var on the seed\'s practice token (2, 2, 4, 4)."""\n'
                      'assert mean_var(np.array([2.0, 2.0, 4.0, 4.0])) == (3.0, 1.0)\n'
                      '### BEGIN HIDDEN TESTS\nassert abs(mean_var(np.array([1.0, 2.0, 3.0]))[1] - 2 / 3) < 1e-12\n'
                      '### END HIDDEN TESTS', metadata=_meta("mean_var_test", grade=True, points=2)),
    ]
    (root / "source" / "hostile").mkdir()
    nbformat.write(nb, root / "source" / "hostile" / "hostile.ipynb")
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "hostile", "--force"],
                   cwd=root, check=True, capture_output=True, env=env)
    return nbformat.read(root / "release" / "hostile" / "hostile.ipynb", as_version=4)


def _cells(nb, gid):
    return [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == gid]


def answered(release, q1=RMS_CORRECT, q2=MEAN_VAR):
    nb = copy.deepcopy(release)
    if q1 is not None:
        _cells(nb, "rms_norm_impl")[0].source = q1
    if q2 is not None:
        _cells(nb, "mean_var_impl")[0].source = q2
    return nb


def insert_after(nb, gid, source):
    i = nb.cells.index(_cells(nb, gid)[0])
    nb.cells.insert(i + 1, new_code_cell(source))
    return nb


FULL = {"rms_norm_shape": 1.0, "rms_norm_battery": 4.0, "mean_var_test": 2.0}
Q1_ZERO = {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0, "mean_var_test": 2.0}
ALL_ZERO = {"rms_norm_shape": 0.0, "rms_norm_battery": 0.0, "mean_var_test": 0.0}


def build_corpus(release, root, port):
    """``{student: (files {name: bytes}, expected points, text expected in the report or None)}``."""
    w = lambda nb: nbformat.writes(nb).encode()  # noqa: E731
    c = {}
    c["honest_correct"] = ({"hostile.ipynb": w(answered(release))}, FULL, None)
    c["honest_nminus1"] = ({"hostile.ipynb": w(answered(release, q1=RMS_N_MINUS_1))}, Q1_ZERO, None)
    # --- structure
    nb = answered(release)
    nb.cells.remove(_cells(nb, "rms_norm_impl")[0])
    c["deleted_answer"] = ({"hostile.ipynb": w(nb)}, Q1_ZERO, "answer cell 'rms_norm_impl' was missing")
    nb = answered(release)
    cell = _cells(nb, "rms_norm_impl")[0]
    lines = RMS_CORRECT.rstrip().splitlines()
    cell.source = "\n".join(lines[:2])
    second = copy.deepcopy(cell)
    second.source = "\n".join(lines[2:])
    nb.cells.insert(nb.cells.index(cell) + 1, second)
    c["split_answer"] = ({"hostile.ipynb": w(nb)}, FULL, "was split into several cells: merged back")
    nb = answered(release)
    cell = _cells(nb, "rms_norm_impl")[0]
    md = new_markdown_cell(cell.source, metadata=cell.metadata)
    nb.cells[nb.cells.index(cell)] = md
    c["markdown_answer"] = ({"hostile.ipynb": w(nb)}, FULL, "had been turned into markdown")
    nb = insert_after(answered(release), "rms_norm_impl",
                      "print('my own check:', rms_norm(torch.ones(2, 4), torch.ones(4)))")
    c["inserted_cell"] = ({"hostile.ipynb": w(nb)}, FULL, None)
    nb = answered(release)
    nb.metadata["kernelspec"] = {"name": "python2-gone", "display_name": "Python 2", "language": "python"}
    c["missing_kernel"] = ({"hostile.ipynb": w(nb)}, FULL, None)
    c["renamed_twice"] = ({"Hostile (1).ipynb": w(answered(release)),
                           "hostile copy.ipynb": w(release)}, FULL, "was renamed: graded as hostile.ipynb")
    c["invalid_json"] = ({"hostile.ipynb": w(answered(release))[:-200]}, ALL_ZERO, "is not valid JSON")
    v3 = nbformat.writes(nbformat.convert(answered(release), 3)).encode()
    c["nbformat3"] = ({"hostile.ipynb": v3}, FULL, "converted to nbformat 4")
    nb = answered(release, q1="# café, naïve: résumé\n" + RMS_CORRECT)
    c["cp1252"] = ({"hostile.ipynb": nbformat.writes(nb).encode("cp1252")}, FULL, "was not UTF-8")
    nb = answered(release)
    for cell in nb.cells:
        if "nbgrader" in cell.metadata:
            cell.metadata["nbgrader"]["schema_version"] = 1
    c["old_schema"] = ({"hostile.ipynb": w(nb)}, FULL, None)
    # --- runaway code
    def q1(code):
        return {"hostile.ipynb": w(answered(release, q1=code))}

    stopped = "cell 'rms_norm_impl': was stopped by the grader's time limit per cell"  # the cause named
    c["infinite_loop"] = (q1("while True:\n    pass\n" + RMS_CORRECT), Q1_ZERO, stopped)
    c["sleeper"] = (q1("import time\ntime.sleep(10**6)\n" + RMS_CORRECT), Q1_ZERO, stopped)
    c["memory_bomb"] = (q1("hog = bytearray(64 * 2**30)\n" + RMS_CORRECT), Q1_ZERO, None)
    c["sys_exit"] = (q1("import sys\ndef rms_norm(x, weight, eps=1e-6):\n    sys.exit(0)"), Q1_ZERO, None)
    c["os_exit"] = (q1("import os\nos._exit(1)\n" + RMS_CORRECT), Q1_ZERO, None)
    c["killed_kernel"] = (q1("import faulthandler\nfaulthandler._sigsegv()\n" + RMS_CORRECT),
                          Q1_ZERO, "the grading kernel died or hung in answer cell 'rms_norm_impl'")
    c["input_call"] = (q1("name = input('name? ')\n" + RMS_CORRECT), Q1_ZERO, None)
    c["print_flood"] = (q1("print('x' * 300_000_000)\n" + RMS_CORRECT), FULL, None)
    # --- tampering (q1 is the n-1 answer, which honestly earns 0): nothing is removed, each
    # construct is flagged for the instructor's review (its words after the prefix); a checker
    # the answer defines changes no test cell (each imports its own): nothing to flag
    tamper = {
        "patch_checker": ("import normref\n"
                          "normref.check_rms_norm = lambda fn, **k: type('R', (), {'passed': True, 'score': 1.0})()",
                          "modifies normref.check_rms_norm"),
        "patch_allclose": ("torch.allclose = lambda *a, **k: True\nnp.allclose = lambda *a, **k: True",
                           "modifies torch.allclose"),
        "redefine_checker": ("class _R:\n    passed, score = True, 1.0\ndef check_rms_norm(fn, **kw):\n    return _R()",
                             None),
        "silence_traceback": ("get_ipython().showtraceback = lambda *a, **k: None", "uses get_ipython"),
        "forge_display": ("ip = get_ipython()\nip.display_formatter.formatters['text/plain']"
                          ".for_type(float, lambda o, p, c: p.text('4.0'))", "uses get_ipython"),
        "obfuscated": ("exec(bytes.fromhex('696d706f7274206e6f726d726566').decode())", "uses exec"),
    }
    for sid, (code, what) in tamper.items():
        c[sid] = ({"hostile.ipynb": w(answered(release, q1=RMS_N_MINUS_1 + "\n" + code))}, Q1_ZERO,
                  what and f"{REVIEW_PREFIX}{what}")
    nb = answered(release, q1=RMS_N_MINUS_1)
    for cell in _cells(nb, "rms_norm_shape"):
        cell.source = "print('all good')"
    c["edited_locked"] = ({"hostile.ipynb": w(nb)}, Q1_ZERO, "locked cell 'rms_norm_shape' had been edited")
    ref = ("import torch.nn.functional as F\ndef rms_norm(x, weight, eps=1e-6):\n"
           "    return F.rms_norm(x, (x.shape[-1],), weight, eps)")
    c["calls_reference"] = ({"hostile.ipynb": w(answered(release, q1=ref))}, Q1_ZERO,
                            "0 points: calls F.rms_norm")
    # --- isolation: honest answers plus an inserted cell that tries to escape
    escape = f"""
import glob, os, sqlite3
found = []
for path in [{str(root / 'gradebook.db')!r}, {str(root / 'source' / 'hostile' / 'hostile.ipynb')!r}]:
    try:
        open(path, 'rb').read(10); found.append('READ ' + path)
    except OSError as e:
        found.append('blocked ' + type(e).__name__)
try:
    db = sqlite3.connect({str(root / 'gradebook.db')!r}); db.execute("update grade set manual_score = 1000")
    db.commit(); found.append('WROTE gradebook')
except Exception as e:
    found.append('blocked ' + type(e).__name__)
found.append('source files visible: %d' % len(glob.glob({str(root)!r} + '/**/source/**', recursive=True)))
for path in [{str(root / 'autograded' / 'evil.txt')!r}, {str(root / 'release' / 'hostile' / 'hostile.ipynb')!r}]:
    try:  # may 'succeed' inside the sandbox's own throw-away file system: the host is checked
        open(path, 'a').write('x')
    except OSError:
        pass
import socket
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=3); found.append('NETWORK reached')
except OSError as e:
    found.append('blocked ' + type(e).__name__)
print(found)
"""
    nb = insert_after(answered(release), "rms_norm_impl", escape)
    c["escape_attempt"] = ({"hostile.ipynb": w(nb)}, FULL, None)
    return c


@dataclass
class Graded:
    """The module's one grading run: every student of the three corpora below, in one course."""

    root: Path
    release: nbformat.NotebookNode
    run: object
    hits: list  # connections the escape attempt made to this process's listening socket
    corpus: dict  # test_hostile_corpus's: {student: (files, expected points, report text)}
    forgeries: dict  # {student: (files, expected points)}
    others: dict  # {student: (assignment, files, expected points)}
    red_team: dict  # {student: (answer, expected points)}, students named RED_TEAM + name
    own_cgroups: list  # this process's sandbox cgroups left after the run

    @property
    def flags(self) -> dict:
        return json.loads((self.root / "reports" / "report.json").read_text())["flags"]

    def autograded(self, sid: str, assignment: str = "hostile") -> nbformat.NotebookNode:
        return nbformat.read(self.root / "autograded" / sid / assignment / f"{assignment}.ipynb", 4)


RED_TEAM = "rt_"  # the red team's students (their honest one is named like the forgeries' honest)


@pytest.fixture(scope="module")
def graded(bubblewrap, tmp_path_factory) -> Graded:
    """The three corpora (the issue's list, issue 14's forgeries and caps, the red team's routes)
    graded by one ``grade_class`` run with the sandbox required, two workers, 30 s per cell;
    a socket listens on this machine the whole run, for the escape attempt to reach."""
    from grader.kernel.sandbox import PIDS_CGROUP_ROOT

    if not sandbox_available():
        pytest.fail(f"{bubblewrap} is installed but cannot create namespaces on this machine")
    base = tmp_path_factory.mktemp("hostile")
    root = base / "course"
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    for sub in ("source", "release"):
        shutil.copytree(REPO / sub, root / sub)
    release = make_hostile_assignment(root)
    hits = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    port = server.getsockname()[1]
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                hits.append(conn)
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    corpus, forgeries, others = build_corpus(release, root, port), build_forgeries(release), build_others()
    red_team = build_red_team(root)
    tree = base / "submitted"
    files = {sid: ("hostile", f) for sid, (f, _, _) in corpus.items()}
    files.update({sid: ("hostile", f) for sid, (f, _) in forgeries.items()})
    files.update({sid: (a, f) for sid, (a, f, _) in others.items()})
    w = lambda nb: nbformat.writes(nb).encode()  # noqa: E731
    files.update({RED_TEAM + sid: ("hostile", {"hostile.ipynb": w(answered(release, q1=q1))})
                  for sid, (q1, _) in red_team.items()})
    for sid, (a, fs) in files.items():
        for name, data in fs.items():
            (tree / sid / a / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / sid / a / name).write_bytes(data)
    saved = os.environ.get(ENV)
    try:
        run = grade_class(course_root=root, submissions=tree, jobs=2, cell_timeout=30, use_sandbox=True,
                          log=lambda *_: None)
    finally:
        stop.set()
        server.close()
        if saved is None:  # the run points this process at its graded inputs: not for later tests
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = saved
    assert run.sandboxed
    return Graded(root, release, run, hits, corpus, forgeries, others, red_team,
                  sorted(PIDS_CGROUP_ROOT.glob(f"normref-{os.getpid()}-*")))


@pytest.mark.slow
def test_hostile_corpus(graded):
    course_copy, run, corpus, release = graded.root, graded.run, graded.corpus, graded.release
    got = {sid: run.scores.get(("hostile", sid)) for sid in corpus}
    want = {sid: exp for sid, (_, exp, _) in corpus.items() if sid != "invalid_json"}
    assert {k: got[k] for k in want} == want
    assert got["invalid_json"] in (None, ALL_ZERO)
    report = (course_copy / "reports" / "index.html").read_text()
    flags = graded.flags
    for sid, (_, _, text) in corpus.items():
        if text:
            assert any(text in note for note in flags.get(sid, [])), (sid, flags.get(sid))
    assert "invalid_json (hostile)" in report
    # isolation: nothing escaped, the gradebook is intact, no network connection was made
    escaped = graded.autograded("escape_attempt")
    printed = "".join(o.get("text", "") for cell in escaped.cells for o in cell.get("outputs", []))
    assert "READ" not in printed and "WROTE" not in printed and "NETWORK" not in printed, printed
    assert printed.count("blocked") == 4 and "source files visible: 0" in printed, printed
    assert not (course_copy / "autograded" / "evil.txt").exists()
    assert nbformat.read(course_copy / "release" / "hostile" / "hostile.ipynb", 4) == release
    assert graded.hits == []
    with sqlite3.connect(course_copy / "gradebook.db") as db:
        assert db.execute("select count(*) from grade where manual_score = 1000").fetchone()[0] == 0
    # the flood was truncated, not stored
    flood = (course_copy / "autograded" / "print_flood" / "hostile" / "hostile.ipynb").stat().st_size
    assert flood < 3 * 2**20


PROCESS_FLOOD = ("import subprocess\nkids = [subprocess.Popen(['sleep', '10']) for _ in range(300)]\n"
                 + RMS_CORRECT)
WRITE_FLOOD = ("i = 0\nwhile True:  # 32 MiB files until the disk is full\n"
               "    open(f'junk{i}.bin', 'wb').write(b'0' * 2**25)\n    i += 1\n" + RMS_CORRECT)
# A torch.py beside the notebook whose rms_norm-free "torch" would make the checker pass
# everything; and a normref/ package that replaces the checkers outright.
FAKE_TORCH = "# a stand-in for torch: without the fix, the test cells would import this\n"
FAKE_NORMREF = ("class _R:\n    passed, score = True, 1.0\n    def __str__(self):\n        return 'all correct'\n"
                "def check_rms_norm(fn, **kw):\n    return _R()\n")


def visible_battery_lookup() -> str:
    """An answer that knows the visible battery's outputs (it is public) and returns its input
    for anything else."""
    from normref import rms_norm
    from normref.checks.norms import battery

    rows = [f"    (torch.tensor({c.x.tolist()!r}, dtype={c.x.dtype}), "
            f"torch.tensor({rms_norm(c.x, c.weight, eps=c.eps).tolist()!r}, dtype={c.x.dtype}))," for c in
            battery("rms", "torch")]
    return ("KNOWN = [\n" + "\n".join(rows) + "\n]\n\n\ndef rms_norm(x, weight, eps=1e-6):\n"
            "    for known_x, known_y in KNOWN:\n"
            "        if known_x.shape == x.shape and known_x.dtype == x.dtype and torch.equal(known_x, x):\n"
            "            return known_y.clone()\n"
            "    return x.clone()\n")


# correct, but not the reference's algebra: float64 statistics, a sum over D, sqrt then divide
RMS_FLOAT64 = ("def rms_norm(x, weight, eps=1e-6):\n    h = x.double()\n"
               "    ms = (h * h).sum(dim=-1, keepdim=True) / h.shape[-1]\n"
               "    return (h / torch.sqrt(ms + eps) * weight.double()).to(x.dtype)\n")
# n-1 (honestly 0 points), plus a patch of the checkers' results that no syntax rule names
RUNTIME_PATCH = RMS_N_MINUS_1 + ("\nResult = type(check_rms_norm(rms_norm, quick=True))\n"
                                 "Result.passed = property(lambda self: True)\n"
                                 "Result.score = property(lambda self: 1.0)\n")
# Start-up files beside the notebook: each would define a correct rms_norm for a blank answer (and
# leave a marker in the environment) if the grading kernel ran it before the cells.
_DEFINE = "import torch\n" + RMS_CORRECT


def _startup(name: str) -> str:
    return f"import builtins, os\nos.environ['NR_LOADED_{name}'] = '1'\nexec({_DEFINE!r}, builtins.__dict__)\n"


STARTUP_FILES = {
    "sitecustomize.py": _startup("sitecustomize"), "usercustomize.py": _startup("usercustomize"),
    "ipython_config.py": _startup("ipython_config"), "ipython_kernel_config.py": _startup("ipython_kernel_config"),
    ".ipython/profile_default/startup/00-answer.py": _startup("profile_startup"),
    "answer.pth": _startup("pth").replace("\n", "; ").rstrip("; ") + "\n",
}
SHOW_MARKERS = "import os\nprint('LOADED:', sorted(k for k in os.environ if k.startswith('NR_LOADED')))"
# A CheckResult patch no syntax rule names: every in-kernel check then says "passed, 1.0"
PATCH_RESULTS = ("\n_Result = type({call})\n_Result.passed = property(lambda self: True)\n"
                 "_Result.score = property(lambda self: 1.0)\n")


def filled(assignment: str, answers: dict, patches: dict | None = None) -> bytes:
    """The released notebook of ``assignment`` with the answer bank's ``answers``, and code
    appended to some answer cells (``patches``: grade_id -> code)."""
    from grader.demo import fill_answers

    answers = dict(answers)
    for gid, code in (patches or {}).items():
        answers[gid] = answers.get(gid, "") + code
    return nbformat.writes(fill_answers(REPO / "release" / assignment / f"{assignment}.ipynb", answers)).encode()


INDIRECT_REFERENCE = ("def rms_norm(x, weight, eps=1e-6):\n"
                      "    ref = getattr(torch.nn.functional, 'rms' + '_norm')\n"
                      "    return ref(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)\n")


def build_forgeries(release) -> dict:
    """Issue 14's students of the hostile assignment: ``{student: (files, expected points)}``."""
    w = lambda nb: nbformat.writes(nb).encode()  # noqa: E731
    return {
        "honest": ({"hostile.ipynb": w(answered(release))}, FULL),
        "honest_float64": ({"hostile.ipynb": w(answered(release, q1=RMS_FLOAT64))}, FULL),
        "visible_only": ({"hostile.ipynb": w(answered(release, q1=visible_battery_lookup()))},
                         {**Q1_ZERO, "rms_norm_shape": 1.0}),
        "runtime_patch": ({"hostile.ipynb": w(answered(release, q1=RUNTIME_PATCH))}, Q1_ZERO),
        "indirect_reference": ({"hostile.ipynb": w(answered(release, q1=INDIRECT_REFERENCE))}, Q1_ZERO),
        "process_flood": ({"hostile.ipynb": w(answered(release, q1=PROCESS_FLOOD))}, Q1_ZERO),
        "write_flood": ({"hostile.ipynb": w(answered(release, q1=WRITE_FLOOD))}, Q1_ZERO),
        "shadows_course": ({"hostile.ipynb": w(answered(release, q1=RMS_N_MINUS_1)),
                            "torch.py": FAKE_TORCH.encode(), "normref/__init__.py": FAKE_NORMREF.encode()},
                           Q1_ZERO),
        "startup_files": ({"hostile.ipynb": w(insert_after(answered(release, q1=None), "rms_norm_impl", SHOW_MARKERS)),
                           **{k: v.encode() for k, v in STARTUP_FILES.items()}}, Q1_ZERO),
    }


def build_others() -> dict:
    """The block and practice students: ``{student: (assignment, files, expected points)}``."""
    from grader.demo.answer_bank import ANSWERS as BANK, EXPECTED

    block_forged = {**BANK["block"]["module_weight"], "block_impl": BANK["block"]["shared_norm"]["block_impl"]}
    return {
        "block_honest": ("block", {"block.ipynb": filled("block", BANK["block"]["correct"])},
                         EXPECTED["block"]["correct"]),
        "block_forger": ("block", {"block.ipynb": filled("block", block_forged, {
            "rms_module_impl": PATCH_RESULTS.format(call="check_rms_norm_module(RMSNorm, quick=True)"),
            "block_impl": PATCH_RESULTS.format(call="check_pre_ln_block(PreNormBlock, quick=True)")})},
            {**EXPECTED["block"]["correct"], "rms_module_quick": 0.0, "rms_module_battery": 3.0,
             "block_quick": 0.0, "block_battery": 1.0}),
        "practice_honest": ("practice", {"practice.ipynb": filled("practice", BANK["practice"]["correct"])},
                            EXPECTED["practice"]["correct"]),
        "practice_forger": ("practice", {"practice.ipynb": filled("practice", BANK["practice"]["partial"], {
            "practice_mean_var_answer": PATCH_RESULTS.format(call="check_mean_var(1, 1)")})},
            EXPECTED["practice"]["partial"]),
    }


@pytest.mark.slow
def test_forgeries_caps_and_shadowing_through_make_grade(graded):
    """Issue 14 through grade_class: an answer that only knows the visible battery earns the
    visible point only; a run-time patch of the checkers the syntax scan cannot see, an
    indirect reference call, a process flood and a write flood in the answer cell earn what a
    blank answer earns for that question (the rest keeps its points) and are flagged; a module
    beside the notebook shadows nothing, and is flagged; start-up files beside it
    (sitecustomize.py, ipython_config.py, an IPython profile, a .pth ...) are not run, and are
    flagged; honest answers, including one written differently from the reference, keep full
    marks. The block assignment's classes and the practice answers are scored outside the
    kernel too: a run-time patch of every checker's result earns no more than the honest points."""
    from grader.kernel.sandbox import MAX_PROCS, MAX_WRITE_BYTES

    import builtins

    exec(STARTUP_FILES["answer.pth"], {})  # the payload works where it is run:
    assert callable(builtins.rms_norm) and os.environ.pop("NR_LOADED_pth") == "1"
    del builtins.rms_norm  # it defines the blank answer's rms_norm (and a marker)
    course_copy, run, corpus, others = graded.root, graded.run, graded.forgeries, graded.others
    # every kernel's pids cgroup is gone with the run (the kernels are killed after their notebook)
    assert graded.own_cgroups == []
    assert {sid: run.scores.get(("hostile", sid)) for sid in corpus} == {sid: exp for sid, (_, exp) in corpus.items()}
    assert {sid: run.scores.get((a, sid)) for sid, (a, _, _) in others.items()} == \
        {sid: exp for sid, (_, _, exp) in others.items()}
    flags = graded.flags
    assert not flags.get("block_honest") and not flags.get("practice_honest"), flags
    assert any("checkers changed at run time" in f for f in flags.get("block_forger", [])), flags.get("block_forger")
    # no start-up file ran (no marker, the blank answer stayed blank), and each is named in the report
    nb = graded.autograded("startup_files")
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "LOADED: []" in printed, printed
    startup = " ".join(flags["startup_files"])
    for name in ("sitecustomize.py", "usercustomize.py", "ipython_config.py", "ipython_kernel_config.py",
                 "answer.pth", ".ipython/profile_default/startup/00-answer.py"):
        assert f"{name} (" in startup and "never run or imported" in startup, (name, startup)
    assert not flags.get("honest") and not flags.get("honest_float64"), flags
    assert any("checkers changed at run time" in f for f in flags["runtime_patch"]), flags["runtime_patch"]
    assert any("0 points: calls torch's rms_norm" in f
               for f in flags["indirect_reference"]), flags["indirect_reference"]
    # the secret seed is in the run log, and no kernel could read it
    assert (course_copy / "logs" / "scoring" / "seeds.jsonl").read_text().count('"seed"') == 1
    assert any(f"more than {MAX_PROCS} processes" in f for f in flags["process_flood"]), flags["process_flood"]
    assert any(f"more than the {MAX_WRITE_BYTES // 2**20} MiB" in f for f in flags["write_flood"]), flags["write_flood"]
    shadow = " ".join(flags["shadows_course"])
    assert "torch.py" in shadow and "normref" in shadow, shadow
    # the floods' error is the guard's clear message, in the answer cell that caused it
    nb = graded.autograded("process_flood")
    errors = [o for o in _cells(nb, "rms_norm_impl")[0].outputs if o.output_type == "error"]
    assert [o.ename for o in errors][-1] == "GradingSandboxLimit"
    # nothing the flood wrote reached the course's disk
    assert not list(course_copy.rglob("junk*.bin"))


# Routes a red-team student found (2026-12-01), each full marks unflagged before the fixes below.
_REF = "getattr(torch.nn.functional, 'rms' + '_norm')"  # a spelling the syntax scan has no name for
# 1. the graded inputs read in the answer cell (the kernel could read them from its start), the
#    reference's outputs computed there, outside any record, and the function a lookup table
READ_INPUTS = (
    "import base64, io, json, os\nKNOWN = []\n"
    # the inputs, where the grader keeps them (named by the environment, and the course's own path)
    "for _p in (os.environ.get('NORMREF_HANDBACK_INPUTS', ''), INPUTS_PATH):\n"
    "    try:\n        print('INPUTS', open(_p).read()[:20])\n"
    "    except OSError as e:\n        print('NO INPUTS', type(e).__name__)\n"
    "try:\n"
    "    _d = torch.load(io.BytesIO(base64.b64decode(json.load(open(INPUTS_PATH))['rms_norm_battery'])),"
    " weights_only=False)\n"
    "    for _args, _kw, _g in _d['calls']:\n"
    "        _x, _w = _args[0], _args[1]\n"
    "        _eps = _args[2] if len(_args) > 2 else _kw.get('eps', 1e-6)\n"
    f"        KNOWN.append((_x.clone(), {_REF}(_x.float(), (_x.shape[-1],), _w.float(), _eps).to(_x.dtype)))\n"
    "    print('READ', len(KNOWN))\n"
    "except Exception as e:\n    print('UNREADABLE', type(e).__name__)\n"
    "def rms_norm(x, weight, eps=1e-6):\n"
    "    for kx, ky in KNOWN:\n"
    "        if kx.shape == x.shape and kx.dtype == x.dtype and torch.equal(kx, x):\n"
    "            return ky.clone()\n"
    "    return x.clone()\n")
_CHEAT = (f"def rms_norm(x, weight, eps=1e-6):\n"
          f"    return {_REF}(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)\n")
# 2. the hand-back patched through an alias of its module, so the recorder is given no names
_FAKE_RUN_CALLS = ("_orig = h.run_calls\n"
                   "def _fake(fn, calls, reference=None, *a, **k):\n    return _orig(fn, calls, None, *a, **k)\n")
ALIAS_PATCH = "import normref.handback as h\n" + _FAKE_RUN_CALLS + "h.run_calls = _fake\n" + _CHEAT
# ... spelled so that no syntax rule sees it: caught when the hidden test runs
ALIAS_PATCH_UNSEEN = ("import normref, normref.checks\nh = getattr(normref, 'hand' + 'back')\n" + _FAKE_RUN_CALLS
                      + "setattr(h, 'run_' + 'calls', _fake)\n" + _CHEAT)
# 3. the reference laundered through the course's own Post-LN with a zero sublayer
LAUNDER = ("import normref.blocks as _blocks\nfrom functools import partial\n"
           "def rms_norm(x, weight, eps=1e-6):\n"
           f"    norm = partial({_REF}, normalized_shape=(x.shape[-1],), weight=weight.float(), eps=eps)\n"
           "    return getattr(_blocks, 'post' + '_ln')(x.float(), lambda t: t * 0, norm).to(x.dtype)\n")
# 4. a thread pool started in the answer cell, and TorchScript
POOL = ("from concurrent.futures import ThreadPoolExecutor\nPOOL = ThreadPoolExecutor(1)\nPOOL.submit(int).result()\n"
        f"def rms_norm(x, weight, eps=1e-6):\n    f = {_REF}\n"
        "    return POOL.submit(f, x.float(), (x.shape[-1],), weight.float(), eps).result().to(x.dtype)\n")
TORCHSCRIPT = ("CU = torch.jit.CompilationUnit('''\ndef f(x, w, eps: float):\n"
               "    return torch.rms_norm(x, [x.size(-1)], w, eps)\n''')\n"
               "def rms_norm(x, weight, eps=1e-6):\n    return CU.f(x.float(), weight.float(), eps).to(x.dtype)\n")


def build_red_team(root) -> dict:
    """The red team's answers to q1: ``{name: (answer, expected points)}``."""
    inputs_path = root / "logs" / "scoring" / "handback-inputs.json"
    # the pool's thread and TorchScript run the reference where the kernel's recorder does not look;
    # in the clean room, where the references are absent, their call is seen: 0 (issue 30)
    return {"honest": (RMS_CORRECT, FULL),
            "read_inputs": (f"INPUTS_PATH = {str(inputs_path)!r}\n" + READ_INPUTS, Q1_ZERO),
            "alias_patch": (ALIAS_PATCH, Q1_ZERO), "alias_patch_unseen": (ALIAS_PATCH_UNSEEN, Q1_ZERO),
            "launder": (LAUNDER, Q1_ZERO), "pool": (POOL, Q1_ZERO), "torchscript": (TORCHSCRIPT, Q1_ZERO)}


@pytest.mark.slow
def test_red_team_routes_through_make_grade(graded):
    """The red team's routes through grade_class (sandbox on): a reference seen running (laundered,
    through a patched hand-back) earns what a blank answer earns; every route is named in the
    report, the constructs the scan finds for the instructor's review, in the feedback too, and
    nothing is removed. The honest answer keeps full marks, unflagged."""
    course_copy, run, release = graded.root, graded.run, graded.release
    inputs_path = course_copy / "logs" / "scoring" / "handback-inputs.json"
    corpus = graded.red_team
    assert {sid: run.scores.get(("hostile", RED_TEAM + sid)) for sid in corpus} == \
        {sid: exp for sid, (_, exp) in corpus.items()}
    flags = {sid[len(RED_TEAM):]: f for sid, f in graded.flags.items() if sid.startswith(RED_TEAM)}
    assert not flags.get("honest"), flags

    def autograded(sid):
        return graded.autograded(RED_TEAM + sid)

    # 1. the answer cell could not read the inputs (in no file it can open, not yet in the kernel);
    # the inputs and the sealing cell are in neither the autograded notebook nor the feedback
    nb = autograded("read_inputs")
    printed = "".join(o.get("text", "") for c in _cells(nb, "rms_norm_impl") for o in c.get("outputs", []))
    assert "UNREADABLE" in printed and "READ" not in printed.replace("UNREADABLE", ""), printed
    assert printed.count("NO INPUTS") == 2 and "INPUTS {" not in printed, printed  # none inside the sandbox
    inputs = json.loads(inputs_path.read_text())
    text = nbformat.writes(nb)
    assert not any(t in text for t in inputs.values()) and "seal()" not in text and ".inputs(" not in text
    assert len(nb.cells) == len(release.cells)
    for sid in corpus:
        page = (course_copy / "feedback" / (RED_TEAM + sid) / "hostile" / "hostile.html").read_text()
        assert not any(t in page for t in inputs.values()) and ".inputs(" not in page, sid
    # 2. seen by the scan (the alias is a module this cell imported); spelled past it, the patch
    # changes nothing: the graded calls run in the grader's clean room, where the reference is absent
    assert any("modifies h.run_calls" in f for f in flags["alias_patch"]), flags["alias_patch"]
    assert any("calls torch's rms_norm" in f for f in flags["alias_patch_unseen"]), flags["alias_patch_unseen"]
    # 3. the course's own Post-LN is absent there too: every call raised (no rule named: Post-LN
    # is not this question's reference; the norm handed to it was never reached)
    outputs = _cells(autograded("launder"), "rms_norm_battery")[0].outputs
    said = "".join(o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "normref.blocks.post_ln is not available while the grader runs your code" in " ".join(said.split()), said
    # 4. a pool and TorchScript: work the kernel's recorder cannot see, flagged by the scan; their
    # call of the reference seen in the clean room (the pool's thread, TorchScript's dispatcher)
    assert any("imports concurrent.futures" in f for f in flags["pool"]), flags["pool"]
    assert any("TorchScript" in f for f in flags["torchscript"]), flags["torchscript"]
    for sid in ("pool", "torchscript"):
        assert any("calls torch's rms_norm" in f for f in flags[sid]), flags[sid]
    # 5. nothing was removed: each flagged question's feedback says the review line, never a NameError
    for sid in ("alias_patch", "pool", "torchscript"):
        outputs = _cells(autograded(sid), "rms_norm_battery")[0].outputs
        said = " ".join("".join(o.get("data", {}).get("text/plain", "") for o in outputs).split())
        assert REVIEW_PREFIX in said and "removed" not in said and "NameError" not in said, said
