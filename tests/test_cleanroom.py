"""The grader's clean room (grader/kernel/cleanroom.py, cleanroom_seal.py, cleanroom_box.py): a code
question's graded calls run in a process of their own, sandboxed, that executed only the answer's
definitions, with the references absent; nothing the kernel did reaches them, and neither a
kernel nor a clean room sees anything of the grader.

Real parts: bubblewrap, the clean room's own process (its seal: torch's dispatcher, seccomp, the
audit hook), nbgrader's autograde through grade_class for the kernel-side attacks. Every
expected score is what the blank answer earns, or the honest answer's full marks, derived from
the battery (rms_norm_battery: 4 points, rms_norm_shape: 1).
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from grader.kernel import cleanroom, sandbox
from grader.scoring.scores import score_notebook
from grader.scoring.inputs import QUESTIONS, question_inputs
from normref.wire import MIME
from test_hostile import RMS_N_MINUS_1

REPO = Path(__file__).resolve().parents[1]
SEED = 7


# ------------------------------------------------------------------ what runs: the definitions

def _cells(*sources):
    return [(f"cell {i}", s, None) for i, s in enumerate(sources)]


def _defined(cells, roots):
    return [[src for _, src in cell] for cell in cleanroom.definitions(cells, roots)]


def test_the_definitions_are_what_the_graded_names_need_and_nothing_else():
    """A helper function and a constant from other cells run; scratch code, prints, loops and a
    checker imported beside the answer's names do not; a local named like an earlier global
    (``var``) does not pull that global in; an import keeps the names needed only."""
    cells = _cells(
        "import numpy as np\nfrom normref import check_layer_norm, layer_norm as ref\n",
        "var = ref(np.ones(4))\nprint(var)\nfor i in range(3):\n    pass\nSCALE = 1.0\n",
        "def _stats(x):\n    return x.mean(axis=-1, keepdims=True)\n",
        "EPS_DEFAULT = 1e-5\nDEBUG = open('/etc/hosts').read()\n",
        "def my_layer_norm(x, weight, bias, eps=EPS_DEFAULT):\n"
        "    mean = _stats(x)\n    var = x.var(axis=-1, keepdims=True)\n"
        "    return (x - mean) / np.sqrt(var + eps) * weight * SCALE + bias\n",
        None,  # the hidden test: never run
        "my_layer_norm = None  # below the test: not what it sees\n",
    )
    got = _defined(cells, {"my_layer_norm"})
    assert got[0] == ["import numpy as np"]  # neither the checker nor the reference
    assert got[1] == ["SCALE = 1.0"]  # not var (a local of the answer), not the print or the loop
    assert got[2][0].startswith("def _stats(x):")
    assert got[3] == ["EPS_DEFAULT = 1e-05"]
    assert got[4][0].startswith("def my_layer_norm(")
    assert got[5] == [] and got[6] == ["my_layer_norm = None"]  # run after the question (see _drive)
    assert cleanroom.hidden_test_targets('x = 1\nhand_back("rms_norm_battery", rms_norm)\n',
                                         "rms_norm_battery") == ["rms_norm"]
    # IPython's syntax is what the kernel makes of it: a magic is a call (not run), the def stays
    got = _defined(_cells("%matplotlib inline\ndef f(x):\n    return x\n", "%%time\ndef g(x):\n    return x\n"),
                   {"f", "g"})
    assert got == [["def f(x):\n    return x"], ["def g(x):\n    return x"]]
    # a cell that stopped in the kernel (line 3: an error, the time limit) defines what was above
    stopped = nbformat.v4.new_code_cell("A = 1\nB = 2\nwhile True:\n    pass\ndef f():\n    return A + B\n")
    stopped.outputs = [nbformat.v4.new_output("error", ename="KeyboardInterrupt", evalue="", traceback=[
        "Traceback \x1b[36m(most recent call last)\x1b[39m:\n",
        "\x1b[36m  \x1b[39m\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[3]\x1b[39m\x1b[32m, line 3\x1b[39m\n"])]
    assert cleanroom.ran_to(stopped) == 3
    assert _defined([("c", stopped.source, 3)], {"f", "A", "B"}) == [["A = 1", "B = 2"]]
    assert _defined([("c", stopped.source, 0)], {"f"}) == [[]]  # stopped, where not known: nothing


def test_a_loop_an_if_or_a_method_call_that_makes_what_the_answer_needs_is_a_definition():
    """An honest answer may build its table with ``TABLE.update(...)`` or a loop, or pick a value in
    an ``if`` (the red team's honest_dtype_table lost 5/5 for it): those statements run; a print,
    a plot and a call on a module (``torch.manual_seed(0)``: not the student's object) do not."""
    got = _defined(_cells(
        "import torch\nimport matplotlib.pyplot as plt\nCOMPUTE = {}\n"
        "COMPUTE.update({torch.float16: torch.float32})\nprint(COMPUTE)\ntorch.manual_seed(0)\nplt.plot([1])\n",
        "TABLE = {}\nfor k in range(3):\n    TABLE[k] = k * 2\nif TABLE:\n    EXTRA = 1\nelse:\n    EXTRA = 2\n"
        "UNUSED = []\nUNUSED.append(1)\n",
        "def f(x):\n    return COMPUTE[x] + TABLE[0] + EXTRA\n", "result = f(1)\nprint(result)\n"), {"f"})
    assert got == [["import torch", "COMPUTE = {}", "COMPUTE.update({torch.float16: torch.float32})"],
                   ["TABLE = {}", "for k in range(3):\n    TABLE[k] = k * 2",
                    "if TABLE:\n    EXTRA = 1\nelse:\n    EXTRA = 2"],
                   ["def f(x):\n    return COMPUTE[x] + TABLE[0] + EXTRA"], []]


# ------------------------------------------------------------------ attacks, in one clean room

_ATTACKS = {
    # Python-level dispatch: a tensor subclass whose __torch_function__ calls F.rms_norm
    "subclass": '''
class Sneaky(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.mul:
            t = args[0].as_subclass(torch.Tensor)
            return getattr(F, "rms" + "_norm")(t, (t.shape[-1],), args[1], 1e-6)
        return super().__torch_function__(func, types, args, kwargs or {})
def subclass(x, weight, eps=1e-6):
    return (x.float().as_subclass(Sneaky) * weight.float()).as_subclass(torch.Tensor).to(x.dtype)
''',
    # the call walks its frames to the grader's objects, empties any record it finds, calls the norm
    "frames": '''
def frames(x, weight, eps=1e-6):
    f = sys._getframe().f_back
    while f is not None:
        for v in list(f.f_locals.values()):
            if type(v).__name__ in ("Attempts", "ReferenceRecorder"):
                v.found = []
        f = f.f_back
    return getattr(F, "rms" + "_norm")(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)
''',
    # a pool the definitions start, running the reference on another thread
    "thread": '''
POOL = futures.ThreadPoolExecutor(1)
def thread(x, weight, eps=1e-6):
    f = getattr(F, "rms" + "_norm")
    return POOL.submit(f, x.float(), (x.shape[-1],), weight.float(), eps).result().to(x.dtype)
''',
    # torch patched by the definitions: a name that hides the reference
    "patched": '''
torch.row_norm = getattr(F, "rms" + "_norm")
def patched(x, weight, eps=1e-6):
    return torch.row_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)
''',
    # torch's Python reference code, and reading it back from its file
    "refs": '''
def refs(x, weight, eps=1e-6):
    return (torch._refs._normalize(x.float(), [x.ndim - 1], eps)[0] * weight).to(x.dtype)
''',
    "reload": '''
def reload(x, weight, eps=1e-6):
    importlib.reload(torch._refs)
    return torch._refs.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)
''',
    # a fresh interpreter (no stand-ins there), and raw memory (ctypes)
    "process": '''
def process(x, weight, eps=1e-6):
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return x
''',
    "native": '''
def native(x, weight, eps=1e-6):
    ctypes.CDLL(None).getpid()
    return x
''',
    # the course's own helper that holds a norm, and normref's reference by an alias
    "helper": '''
def helper(x, weight, eps=1e-6):
    from normref.checks import norms
    return norms.model_t("rms", x, weight, None, eps)  # a checker's fault model with no fault: the norm
''',
    "alias": '''
def alias(x, weight, eps=1e-6):
    return normref.rms_norm(x, weight, eps)
''',
    # TorchScript's static runtime: aten::layer_norm by its own out-variant kernel, past the dispatcher
    # (LayerNorm of [x, -x] is RMSNorm of x); and a scripted function
    "static": '''
def static(x, weight, eps=1e-6):
    ir = ("graph(%x : Tensor, %w : Tensor, %b : Tensor, %d : int, %eps : float):\\n"
          "  %t : bool = prim::Constant[value=1]()\\n  %shape : int[] = prim::ListConstruct(%d)\\n"
          "  %y : Tensor = aten::layer_norm(%x, %shape, %w, %b, %eps, %t)\\n  return (%y)\\n")
    sm = torch._C._jit_to_static_module(torch._C.parse_ir(ir))
    h = x.float()
    d = h.shape[-1]
    y = sm(torch.cat([h, -h], dim=-1).contiguous(), torch.ones(2 * d), torch.zeros(2 * d), 2 * d, float(eps))
    return (y[..., :d] * weight).to(x.dtype)
''',
    "scripted": '''
def scripted(x, weight, eps=1e-6):
    f = torch.jit.script(lambda t: t)
    return f(x)
''',
    # what the process can learn of the grader: its environment, PID 1's
    "snoop": '''
def snoop(x, weight, eps=1e-6):
    seen = sorted(os.environ)
    try:
        seen.append(open("/proc/1/environ", "rb").read().decode(errors="replace"))
    except OSError as e:
        seen.append(type(e).__name__)
    raise RuntimeError(repr(seen))
''',
    "honest": '''
EPS_FLOOR = 0.0
def _ms(h):
    return h.pow(2).mean(dim=-1, keepdim=True)
def honest(x, weight, eps=1e-6):
    h = x.float()
    return (h * torch.rsqrt(_ms(h) + eps + EPS_FLOOR) * weight).to(x.dtype)
''',
}
_IMPORTS = ("import ctypes, importlib, os, subprocess, sys\nfrom concurrent import futures\nimport torch\n"
            "import torch.nn.functional as F\nimport normref\n")


def _run_attacks(sandboxed: bool) -> dict:
    """Every attack as ``rms_norm`` of rms_norm_battery, in one clean room: ``{name: (points of 4,
    references, raised)}``."""
    gid = "rms_norm_battery"
    room = cleanroom.Room(sandboxed, time.monotonic() + 120)
    try:
        room.send({"setup": {"torch": True, "torch_ops": True, "normref_names": list(
            QUESTIONS[gid].reference["normref_names"]), "preimport": ["concurrent.futures", "normref.checks.norms"],
            "preimport_names": [["normref", "rms_norm"], ["normref.checks", "norms"]]}})
        assert "sealed" in room.receive()
        stmts = [(name, ast.unparse(n)) for name, src in [("imports", _IMPORTS), *_ATTACKS.items()]
                 for n in ast.parse(src).body]
        room.send({"define": stmts})
        assert [d for d in room.receive()["defined"] if d[1]] == []
        out = {}
        handed = cleanroom.Handed()
        for name in _ATTACKS:
            kind, begins = cleanroom.units(question_inputs(gid, SEED), handed)
            room.send({"unit": {"grade_id": gid, "kind": kind, "target": [name], "inputs": begins[0]()}})
            calls = room.receive(handed)["result"]["calls"]
            cell = nbformat.v4.new_code_cell(metadata={"nbgrader": {"grade_id": gid}})
            cell.outputs = [nbformat.v4.new_output("display_data", data={MIME: {"grade_id": gid, "calls": calls}})]
            scored = score_notebook(nbformat.v4.new_notebook(cells=[cell]), SEED)[gid]
            out[name] = (4 * scored.fraction, sorted({w for c in calls for w in c.get("references", [])}),
                         sorted({" ".join(c["raised"]) for c in calls if "raised" in c}))
        room.send({"end": True})
    finally:
        room.close()
    return out


def test_in_the_clean_room_the_references_are_absent_whatever_reaches_for_them(bubblewrap, monkeypatch):
    """Each attack, in a sandboxed clean room, earns what the blank answer earns (0 of 4); a call
    that reached a reference is scored 0 with it named (the rule's words); nothing brings a
    reference back (its file, another interpreter, ctypes); the process sees nothing of the
    grader; the honest answer (a helper and a constant of its own) keeps full marks."""
    for var in sandbox.SINGLE_THREAD_VARS:
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("NORMREF_SECRET_OF_THE_INSTRUCTOR", "hunter2")
    monkeypatch.setenv(sandbox.WARM_SWITCH, "0")  # a fresh clean room: the warm one is graded below
    got = _run_attacks(sandboxed=True)
    assert got.pop("honest") == (4.0, [], [])
    assert {name: points for name, (points, _, _) in got.items()} == dict.fromkeys(got, 0.0)
    refs = {name: r for name, (_, r, _) in got.items()}
    for name in ("subclass", "frames", "thread", "patched"):
        assert refs[name] == ["calls torch's rms_norm"], (name, got[name])
    assert refs["refs"] == ["calls torch's reference code torch._refs._normalize"], got["refs"]
    assert refs["alias"] == ["calls normref.functional.rms_norm"], got["alias"]
    assert refs["helper"] == ["calls the course's own normref.checks.norms.model_t"], got
    raised = {name: " ".join(r) for name, (_, _, r) in got.items()}
    assert "Operation not permitted" in raised["reload"] and "_refs" in raised["reload"]
    assert "PermissionError [Errno 1] Operation not permitted" in raised["process"]
    assert "ctypes.dlopen is not available" in raised["native"]
    assert "TorchScript is not available in the grader's clean room" in raised["static"], raised["static"]
    assert "torch.jit.script: TorchScript is not available" in raised["scripted"], raised["scripted"]
    seen = raised["snoop"]
    assert "PermissionError" in seen and "NORMREF_SECRET" not in seen and "hunter2" not in seen
    assert "NORMREF_SCRATCH_ROOT" not in seen and "JUPYTER_PATH" not in seen and "HOSTNAME" not in seen


def test_the_students_own_modules_handed_in_run_in_the_clean_room_after_its_seal(bubblewrap, tmp_path, monkeypatch):
    """A module of the student's own beside the notebook is imported in the clean room as in the
    kernel (the answer cell ``from helpers import rms_norm``; a start-up file the answer imports
    for what it defines): an honest one earns full marks; one that calls the reference is seen
    doing it (it runs after the seal); one named like an installed module is not served (the
    kernel searches the folder last: ``torch.py`` is never the student's)."""
    for var in sandbox.SINGLE_THREAD_VARS:
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv(sandbox.WARM_SWITCH, "0")
    correct = ("import torch\ndef rms_norm(x, weight, eps=1e-6):\n    h = x.float()\n"
               "    return (h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps) * weight).to(x.dtype)\n")
    (tmp_path / "helpers.py").write_text(correct)
    (tmp_path / "cheat.py").write_text("import torch.nn.functional as F\n"
                                       "def rms_norm(x, weight, eps=1e-6):\n"
                                       "    return F.rms_norm(x, (x.shape[-1],), weight, eps)\n")
    (tmp_path / "startup.py").write_text("import builtins\nexec(" + repr(correct) + ", builtins.__dict__)\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from .impl import rms_norm\n")
    (tmp_path / "pkg" / "impl.py").write_text(correct)
    (tmp_path / "torch.py").write_text("raise SystemExit('not the real torch')\n")
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "mod.py").write_text("x = 1\n")  # no __init__.py: not a package the kernel imports
    own = cleanroom.own_modules(tmp_path)
    assert sorted(own) == ["cheat", "helpers", "pkg", "pkg.impl", "startup", "torch"]
    assert own["pkg"][1] is True and own["helpers"] == [correct, False]
    # the import of an own module is a definition, whole, though it binds no name the answer needs
    got = [[src for _, src in cell] for cell in cleanroom.definitions(
        _cells("import startup, numpy\nimport os\n", "from helpers import rms_norm, other\n"), {"rms_norm"},
        frozenset({"startup", "helpers"}))]
    assert got == [["import startup, numpy"], ["from helpers import rms_norm, other"]]

    gid = "rms_norm_battery"
    # one room: each answer by a name of its own (the start-up file's rms_norm is a builtin)
    answers = {"via_helpers": "from helpers import rms_norm as via_helpers",
               "via_cheat": "from cheat import rms_norm as via_cheat", "rms_norm": "import startup",
               "via_pkg": "from pkg import rms_norm as via_pkg"}
    statements = [[(name, answer) for name, answer in answers.items()]]
    out = {}
    room = cleanroom.Room(True, time.monotonic() + 120)
    try:
        setup = cleanroom._setup(None, [(0, gid, list(answers))], statements, True,
                                 {gid: question_inputs(gid, SEED)}, own)
        assert "helpers" not in setup["preimport"] and "torch" in setup["preimport"]
        room.send({"setup": setup})
        assert "sealed" in room.receive()
        room.send({"define": statements[0]})
        assert [d for d in room.receive()["defined"] if d[1]] == []
        for name in answers:
            handed = cleanroom.Handed()
            kind, begins = cleanroom.units(question_inputs(gid, SEED), handed)
            room.send({"unit": {"grade_id": gid, "kind": kind, "target": [name], "inputs": begins[0]()}})
            calls = room.receive(handed)["result"]["calls"]
            cell = nbformat.v4.new_code_cell(metadata={"nbgrader": {"grade_id": gid}})
            cell.outputs = [nbformat.v4.new_output("display_data", data={MIME: {"grade_id": gid, "calls": calls}})]
            out[name] = (4 * score_notebook(nbformat.v4.new_notebook(cells=[cell]), SEED)[gid].fraction,
                         sorted({w for c in calls for w in c.get("references", [])}))
        room.send({"end": True})
    finally:
        room.close()
    assert out == {"via_helpers": (4.0, []), "rms_norm": (4.0, []), "via_pkg": (4.0, []),
                   "via_cheat": (0.0, ["calls torch's rms_norm"])}, out


def test_a_kernel_output_in_a_code_questions_test_cell_is_never_scored():
    """What a kernel shows in a code question's test cell in the hand-back's format (a forged
    set of outputs, say) is removed; the clean room's is the cell's one hand-back."""
    gid = "rms_norm_battery"
    cell = nbformat.v4.new_code_cell(metadata={"nbgrader": {"grade_id": gid}})
    forged = {"grade_id": gid, "calls": [{"out": {"t": "py", "value": 1}}]}
    cell.outputs = [nbformat.v4.new_output("stream", text="my own check\n"),
                    nbformat.v4.new_output("display_data", data={MIME: forged}),
                    nbformat.v4.new_output("display_data", data={MIME: forged})]
    nb = nbformat.v4.new_notebook(cells=[cell])
    cleanroom.put(nb, {gid: {"grade_id": gid, "missing": "NameError: name 'rms_norm' is not defined"}})
    assert [o.get("text") for o in cell.outputs if o.output_type == "stream"] == ["my own check\n"]
    assert [o["data"][MIME] for o in cell.outputs if MIME in o.get("data", {})] == [
        {"grade_id": gid, "missing": "NameError: name 'rms_norm' is not defined"}]
    scored = score_notebook(nb, SEED)[gid]
    assert scored.fraction == 0 and "NameError: name 'rms_norm' is not defined" in scored.text
    cleanroom.put(nb, {})  # the clean room gave nothing: nothing is scored, nothing forged survives
    assert score_notebook(nb, SEED)[gid].fraction == 0 and not any(MIME in o.get("data", {}) for o in cell.outputs)


# ------------------------------------------------------------------ kernel-side attacks, through grading

_REF = 'getattr(torch.nn.functional, "rms" + "_norm")'  # a spelling the syntax scan has no name for
_CHEAT = (f"def rms_norm(x, weight, eps=1e-6):\n"
          f"    return {_REF}(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)\n")
# code an answer cell leaves running: a process that runs the reference for the student's function
_SERVER = '''
import io, socket, numpy as np, torch
s = socket.socket(socket.AF_UNIX)
s.bind("/tmp/rms.sock")
s.listen()
while True:
    c, _ = s.accept()
    data = b""
    while not data.endswith(b"END"):
        data += c.recv(1 << 20)
    z = np.load(io.BytesIO(data[:-3]))
    x, w = torch.from_numpy(z["x"]), torch.from_numpy(z["w"])
    y = getattr(torch.nn.functional, "rms" + "_norm")(x, (x.shape[-1],), w, float(z["eps"]))
    out = io.BytesIO()
    np.save(out, y.numpy())
    c.sendall(out.getvalue())
    c.close()
'''
LEAVES_PROCESS = f'''import io, socket, subprocess, sys, time
import numpy as np
SERVER = subprocess.Popen([sys.executable, "-c", {_SERVER!r}])
time.sleep(5)
def rms_norm(x, weight, eps=1e-6):
    c = socket.socket(socket.AF_UNIX)
    c.connect("/tmp/rms.sock")
    buf = io.BytesIO()
    np.savez(buf, x=x.float().numpy(), w=weight.float().numpy(), eps=np.float64(eps))
    c.sendall(buf.getvalue() + b"END")
    data = b""
    while chunk := c.recv(1 << 20):
        data += chunk
    return torch.from_numpy(np.load(io.BytesIO(data))).to(x.dtype)
'''
# installed before the hidden tests: an import hook, a patched torch, an input transformer that
# shows a hand-back of its own in every cell run after it (here: the visible check's correct
# outputs, computed beforehand with the reference)
IMPORT_HOOK = ('import sys\nclass Hook:\n    def find_spec(self, name, path=None, target=None):\n        return None\n'
               'getattr(sys, "meta" + "_path").insert(0, Hook())\n' + _CHEAT)
PATCHED_TORCH = (f'type.__setattr__(torch.Tensor, "rms_rows", lambda self, w, eps: {_REF}(self.float(), '
                 f'(self.shape[-1],), w.float(), eps).to(self.dtype))\n'
                 'def rms_norm(x, weight, eps=1e-6):\n    return x.rms_rows(weight, eps)\n')
FRAMES = ('import sys\n'
          'def rms_norm(x, weight, eps=1e-6):\n    f = getattr(sys, "_get" + "frame")()\n'
          '    while f is not None:\n        for v in list(getattr(f, "f_" + "locals").values()):\n'
          '            try:\n                v.found.clear()\n            except Exception:\n'
          '                pass\n        f = getattr(f, "f_" + "back")\n'
          f'    return {_REF}(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)\n')
SUBCLASS = ('class Rows(torch.Tensor):\n    @classmethod\n'
            '    def __torch_function__(cls, func, types, args=(), kwargs=None):\n'
            '        if func is torch.Tensor.mul:\n            t = args[0].as_subclass(torch.Tensor)\n'
            f'            return {_REF}(t, (t.shape[-1],), args[1], 1e-6)\n'
            '        return super().__torch_function__(func, types, args, kwargs or {})\n'
            'def rms_norm(x, weight, eps=1e-6):\n'
            '    return (x.float().as_subclass(Rows) * weight.float()).as_subclass(torch.Tensor).to(x.dtype)\n')
HELPER = "EPS0 = 0.0\n\ndef _mean_square(h):\n    return (h * h).mean(dim=-1, keepdim=True)\n"
HONEST_WITH_HELPER = ("def rms_norm(x, weight, eps=1e-6):\n    h = x.float()\n"
                      "    return (h * torch.rsqrt(_mean_square(h) + eps + EPS0) * weight).to(x.dtype)\n")


def _forged_outputs() -> str:
    """An answer cell (past the syntax scan) that installs an IPython input transformer: in every
    cell run after it, the graded inputs a hidden test holds are read, the reference's outputs
    for them computed, shown in the hand-back's format, and the grader's own hand-back removed.
    Then the n-1 answer. (A kernel that is given no graded input, and whose outputs are not
    scored, leaves it nothing to forge.)"""
    forge = r'''
import re as _re
import IPython, normref, torch
import IPython.display as _d
_W = getattr(normref, "wi" + "re")
_REF = getattr(torch.nn.functional, "rms" + "_norm")
def _rms(x, w, eps=1e-6):
    return _REF(x.float(), (x.shape[-1],), w.float(), eps).to(x.dtype)
def _forge(lines):
    out, shown = [], []
    for ln in lines:
        m = _re.search(r'\.inputs\("(\w+)", "([^"]+)"\)', ln)
        if m:
            calls = _W.load_inputs(m.group(2)).get("calls") or []
            recs = [{"out": _W.encode(_rms(*a, **k))} for a, k, g in calls]
            _FORGED[m.group(1)] = {"grade_id": m.group(1), "calls": recs}
            shown.append("_d.display({%r: _FORGED[%r]}, raw=True)\n" % (MIME, m.group(1)))
        elif not _re.search(r'_[A-Za-z]{16}\("', ln):  # the grader's sealed hand-back: dropped
            out.append(ln)
    return shown + out
_FORGED = {}
IPython.get_ipython().input_transformers_post.append(_forge)
'''.replace("MIME", repr(MIME))
    return forge + RMS_N_MINUS_1


@pytest.fixture(scope="module")
def kernel_attacks(bubblewrap, tmp_path_factory):
    """The kernel-side attacks as students of test_hostile's two-question assignment, graded by one
    sandboxed grade_class run (two workers, warm kernels and clean rooms)."""
    from test_hostile import answered, insert_after, make_hostile_assignment

    from grader import grade_class
    from normref.handback_files import HANDBACK_ENV

    base = tmp_path_factory.mktemp("cleanroom")
    root = base / "course"
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    for sub in ("source", "release"):
        shutil.copytree(REPO / sub, root / sub)
    release = make_hostile_assignment(root)
    students = {"honest": answered(release), "blank": answered(release, q1=None),
                "honest_helper": insert_after(answered(release, q1=HONEST_WITH_HELPER), "rms_norm_impl", HELPER),
                "leaves_process": answered(release, q1=LEAVES_PROCESS),
                "import_hook": answered(release, q1=IMPORT_HOOK), "patched_torch": answered(release, q1=PATCHED_TORCH),
                "input_transformer": answered(release, q1=_forged_outputs()),
                "frames": answered(release, q1=FRAMES), "subclass": answered(release, q1=SUBCLASS)}
    for sid, nb in students.items():
        (base / "submitted" / sid / "hostile").mkdir(parents=True)
        nbformat.write(nb, base / "submitted" / sid / "hostile" / "hostile.ipynb")
    saved = os.environ.get(HANDBACK_ENV)
    try:
        run = grade_class(course_root=root, submissions=base / "submitted", jobs=2, cell_timeout=30,
                          use_sandbox=True, log=lambda *_: None)
    finally:
        os.environ.pop(HANDBACK_ENV, None) if saved is None else os.environ.update({HANDBACK_ENV: saved})
    flags = json.loads((root / "reports" / "report.json").read_text())["flags"]
    return run, flags, root


@pytest.mark.slow
def test_code_left_running_or_installed_by_an_answer_cell_earns_what_a_blank_answer_earns(kernel_attacks):
    """A process left running to compute the reference, an import hook, a patched torch, an
    input transformer that shows the reference's outputs for a hidden test's inputs in the
    hand-back's format (there are none to read: the kernel gets no graded input),
    a call walking its frames, a tensor subclass: each earns no more than the blank answer (q1:
    0 of 5; q2, mean and variance, answered correctly by all: 2), the reference named where the
    clean room saw it attempted; the honest answers, one with a helper and a constant in a cell of
    their own, earn full marks, unflagged."""
    from test_hostile import FULL, Q1_ZERO

    run, flags, _ = kernel_attacks
    scores = {sid: run.scores.get(("hostile", sid)) for sid in (
        "honest", "blank", "honest_helper", "leaves_process", "import_hook", "patched_torch", "input_transformer",
        "frames", "subclass")}
    assert scores.pop("honest") == FULL and scores.pop("honest_helper") == FULL
    assert scores == dict.fromkeys(scores, Q1_ZERO), scores
    assert not flags.get("honest") and not flags.get("honest_helper"), flags
    for sid in ("import_hook", "frames", "subclass"):
        assert any("calls torch's rms_norm" in f for f in flags.get(sid, [])), (sid, flags.get(sid))


@pytest.mark.slow
def test_a_kernel_sees_nothing_of_the_grader(kernel_attacks, bubblewrap, tmp_path, monkeypatch):
    """Inside the sandbox, fresh or warm: PID 1 (bubblewrap) shows neither the grader's environment
    nor its options (``/proc/1/environ``, ``/proc/1/cmdline``), the kernel's own environment is
    the sandbox's (no variable of the grader's, no course path), its working directory is its
    folder's copy, and no frame below the student's code holds the worker's environment."""
    from jupyter_client import KernelManager

    for var in sandbox.SINGLE_THREAD_VARS:
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("NORMREF_SECRET_OF_THE_INSTRUCTOR", "hunter2")
    probe = ("import json, os, sys\nf, frames = sys._getframe(), []\n"
             "while f is not None:\n    frames.append(repr(f.f_locals)[:20000])\n    f = f.f_back\n"
             "print(json.dumps({'cmdline': open('/proc/1/cmdline', 'rb').read().decode(errors='replace'),"
             " 'environ': open('/proc/1/environ', 'rb').read().decode(errors='replace'), 'env': dict(os.environ),"
             " 'cwd': os.getcwd(), 'frames': frames}))")
    from grader.kernel import warm

    warm.stop_zygote()  # this process's zygote, if an earlier test left one, was started with another environment
    seen = {}
    for mode in ("fresh", "warm"):
        monkeypatch.setenv(sandbox.WARM_SWITCH, "1" if mode == "warm" else "0")
        with sandbox.SandboxSession(tmp_path / mode / "course") as sb:
            args, env = sb.worker(0)
            for k, v in env.items():
                monkeypatch.setenv(k, v)
            folder = tmp_path / mode / "course" / "autograded" / "student-folder" / "hostile"
            folder.mkdir(parents=True)
            km = KernelManager(kernel_name=sandbox.KERNEL_NAME, transport="ipc", ip=args[-1].split("=", 1)[1])
            km.start_kernel(cwd=str(folder), extra_arguments=["--HistoryManager.hist_file=:memory:"])
            kc = km.client()
            kc.start_channels()
            try:
                kc.wait_for_ready(timeout=120)
                out = []
                kc.execute_interactive(probe, timeout=120, output_hook=lambda m: out.append(
                    m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
                seen[mode] = json.loads("".join(out))
                assert (getattr(km.provisioner, "warm", None) is not None) == (mode == "warm")
            finally:
                kc.stop_channels()
                km.shutdown_kernel(now=True)
    warm.stop_zygote()
    for mode, s in seen.items():
        text = json.dumps(s)
        for secret in ("hunter2", "NORMREF_SECRET", str(tmp_path), "student-folder", "NORMREF_SCRATCH_ROOT",
                       "JUPYTER_PATH", "NORMREF_PIDS_CGROUP", "NORMREF_MEMORY_CGROUP", "NORMREF_HANDBACK_INPUTS"):
            assert secret not in text, (mode, secret)
        assert s["environ"] == "" and s["cmdline"].split("\0")[:2] == [sandbox.BWRAP, "--args"], (mode, s["cmdline"])
        assert s["cwd"] == sandbox.SANDBOX_WORK and s["env"]["HOME"] == "/tmp/home", (mode, s["cwd"])
    assert seen["fresh"]["env"] == seen["warm"]["env"]


def test_an_answer_of_the_clean_room_that_does_not_read_costs_its_notebook_not_the_run():
    """What a clean room sends is the student's to forge: a ``.npy`` header announcing 2**50 values
    (or objects) allocates nothing and is refused as a ValueError, which a score reads as the call
    raising; a nested JSON past the parser's depth or an answer of the wrong shape stops that room
    with what went wrong, and its questions score 0 (never the grader's process, never the class)."""
    import base64
    import io

    import numpy as np

    from normref.wire import decode

    for header in ({"descr": "<f8", "fortran_order": False, "shape": (2**50,)},
                   {"descr": "|O", "fortran_order": False, "shape": (2,)}):
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, header)
        buf.write(b"\0" * 16)
        with pytest.raises(ValueError, match="is not what the hand-back sends"):
            decode({"t": "numpy", "npy": base64.b64encode(buf.getvalue()).decode()})
    eye = base64.b64encode(_npy_bytes(np.eye(3))).decode()
    assert decode({"t": "numpy", "npy": eye}).tolist() == np.eye(3).tolist()

    class Forged(cleanroom.Room):  # a room whose answers are what a student's code wrote to its pipe
        answers: list = []

        def __init__(self, *a, **k):
            self.how, self.warm, self.proc = "forged", None, None

        def send(self, msg):
            pass

        def receive(self, handed=None):
            return self.answers.pop(0)

        def close(self):
            pass

    gid = "rms_module_battery"  # a class question: its answer is a list of cases, one per unit
    Forged.answers = [{"sealed": {}}, {"defined": []}, {"result": {"cases": 5}}]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(cleanroom, "Room", Forged)
        got = cleanroom._drive([(0, gid, ["RMSNorm"])], [[]], {"torch": True}, {gid: question_inputs(gid, SEED)},
                               False, time.monotonic() + 10)
    assert got["notes"] == ["its answer did not read (TypeError: 'int' object is not iterable)"], got
    assert got["bundles"][gid] == {"grade_id": gid, "missing": "the grader's clean room stopped: its answer did not "
                                   "read (TypeError: 'int' object is not iterable)"}


def _npy_bytes(a):
    import io

    import numpy as np

    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()
