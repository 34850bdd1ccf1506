"""The canary (grader/stages/canary.py) and the sandbox's memory cap (grader/kernel/sandbox.py), on real
kernels in the real bubblewrap sandbox.

Before any student is graded, each run grades the instructor's solutions through the same
engine, sandbox, hand-back and scoring; a run whose kernels cannot import torch stops there,
writing nothing but its failed line in the run log. Memory is capped by a cgroup per kernel
(fresh and warm alike); ``RLIMIT_AS``, where there is no memory controller, is what the
installed torch maps plus the same allowance. Each grading test grades one assignment (rmsnorm).
"""
from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from grader.stages import canary
from grader.kernel import sandbox, warm
from grader.demo import demo_class, expected_points
from test_course_state import grader, only_assignments, real_class, snapshot, submitted_tree

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not sandbox.available(), reason="needs bubblewrap")

#: No memory cgroup, fresh kernels, and an address-space cap that torch's libraries do not fit in:
#: the sandboxed kernels cannot import torch (as the CUDA build could not under the old 3 GiB cap).
NO_TORCH = {"NORMREF_MEMORY_CGROUP_ROOT": "/nonexistent", "NORMREF_WARM_KERNELS": "0", "NORMREF_KERNEL_AS_MB": "400"}


def runs(course: Path) -> list[dict]:
    return [json.loads(ln) for ln in (course / "logs" / "runs.jsonl").read_text().splitlines()]


def test_a_run_whose_kernels_cannot_import_torch_stops_at_the_canary_and_writes_nothing(course_copy, tmp_path):
    before = real_class(course_copy)  # a graded class: gradebook, submitted/
    out = grader("--submissions", submitted_tree(tmp_path / "in", {"ada": "correct"}), course=course_copy,
                 env={**os.environ, **NO_TORCH, "NORMREF_CANARY_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    (line,) = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    # first the kernel's own error (which of torch's libraries fails to map first varies), then what it cost
    # (and the clean room's stop, named after it: it cannot import torch either)
    assert re.match(r"error: canary: the sandboxed kernel could not import torch: (OSError|ImportError): "
                    r"\S+\.so[.\d]*: failed to map segment from shared object; see README: Install( \(.*\))?; so "
                    r"the instructor's own solutions did not score full, nothing was graded: rmsnorm, question "
                    r"rms_norm_shape: 0/1", line), line
    after = snapshot(course_copy)
    assert after.pop("logs/runs.jsonl") and after == before  # gradebook.db, submitted/: not one byte
    assert not (course_copy / "grades.csv").exists() and not (course_copy / "autograded").exists()
    (run,) = runs(course_copy)
    assert run["status"] == "failed" and run["error"].startswith("CanaryFailed: canary:"), run
    assert "could not import torch" in run["error"] and run["batch"] == []
    assert not (course_copy / "logs" / canary.CACHE).exists()  # a failure is not remembered as a pass


def test_an_error_each_case_raised_inside_the_kernel_is_named_first(course_copy, tmp_path):
    """The instructor's solution imports, inside its function, a module the kernel cannot import:
    no cell raises (the cell only defines the function), each hidden test's case raises, and the
    hand-back keeps each case's error; the canary's line starts with that error, then what it cost."""
    only_assignments(course_copy, {"rmsnorm"})
    path = course_copy / "source" / "rmsnorm" / "rmsnorm.ipynb"
    nb = nbformat.read(path, as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "rms_norm_impl"]
    cell.source = cell.source.replace("### BEGIN SOLUTION\n", "### BEGIN SOLUTION\n    import no_such_module_here\n")
    nbformat.write(nb, path)
    out = grader("--submissions", submitted_tree(tmp_path / "in", {"ada": "correct"}), course=course_copy,
                 env={**os.environ, "NORMREF_CANARY_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    (line,) = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: canary: the sandboxed kernel could not import no_such_module_here: "
                           "ModuleNotFoundError: No module named 'no_such_module_here'; see README: Install; so the "
                           "instructor's own solutions did not score full, nothing was graded: rmsnorm, question "
                           "rms_norm_"), line
    assert runs(course_copy)[-1]["status"] == "failed" and not (course_copy / "grades.csv").exists()


def _grades(course: Path) -> dict[tuple[str, str], float]:
    with (course / "grades.csv").open() as f:
        return {(r["assignment"], r["student_id"]): float(r["score"]) for r in csv.DictReader(f)}


def test_an_honest_run_passes_the_canary_which_is_then_cached_until_source_changes(course_copy, tmp_path):
    only_assignments(course_copy, {"rmsnorm"})
    cache = tmp_path / "cache"
    env = {**os.environ, "NORMREF_CANARY_CACHE": str(cache)}
    bank = {st.student_id: st for st in demo_class(["rmsnorm"])}
    ada, bo = bank["ada"], next(st for st in bank.values() if st.variants["rmsnorm"] != bank["ada"].variants["rmsnorm"])
    expect = {name: sum(expected_points(st, "rmsnorm").values()) for name, st in (("ada", ada), ("bo", bo))}

    first = grader("--submissions", submitted_tree(tmp_path / "b1", {"ada": ada.variants["rmsnorm"]}),
                   course=course_copy, env=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "canary: the instructor's solutions scored full on all 2 automatic questions" in first.stdout
    assert _grades(course_copy) == {("rmsnorm", "ada"): expect["ada"]}  # graded as before
    rec = json.loads((course_copy / "logs" / canary.CACHE).read_text())
    assert rec["status"] == "passed" and (cache / "canary" / f"{rec['key']}.json").is_file()

    # the course's own record: skipped (the user's cache off)
    second = grader("--submissions", submitted_tree(tmp_path / "b2", {"bo": bo.variants["rmsnorm"]}),
                    course=course_copy, env={**env, "NORMREF_CANARY_CACHE": "0"})
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "canary: skipped: source/, the installed packages and the sandbox settings are those of the passing " \
           f"canary of {rec['time']} ({course_copy})" in second.stdout
    assert "canary: the instructor's solutions scored" not in second.stdout
    assert _grades(course_copy) == {("rmsnorm", "ada"): expect["ada"], ("rmsnorm", "bo"): expect["bo"]}
    assert [r["status"] for r in runs(course_copy)] == ["ok", "ok"]
    assert runs(course_copy)[1]["stage_seconds"]["canary"] < runs(course_copy)[0]["stage_seconds"]["canary"] / 4

    # source/ changed (a comment in a solution cell): the canary runs again
    src = course_copy / "source" / "rmsnorm" / "rmsnorm.ipynb"
    nb = json.loads(src.read_text())
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    cell["source"] = ["# checked again\n", *cell["source"]] if isinstance(cell["source"], list) \
        else "# checked again\n" + cell["source"]
    src.write_text(json.dumps(nb, indent=1))
    third = grader("--submissions", submitted_tree(tmp_path / "b3", {"ada": ada.variants["rmsnorm"]}),
                   course=course_copy, env=env)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert "canary: the instructor's solutions scored full on all 2 automatic questions" in third.stdout
    assert json.loads((course_copy / "logs" / canary.CACHE).read_text())["key"] != rec["key"]


def test_a_second_course_with_the_same_source_skips_it_through_the_users_cache(course_copy, tmp_path):
    """Correct for a real instructor too: the key holds everything the result depends on (source/,
    nbgrader_config.py, every package, the sandbox settings, the host)."""
    only_assignments(course_copy, {"rmsnorm"})
    cache = tmp_path / "cache"
    other = tmp_path / "other"
    shutil.copytree(course_copy, other)
    env = {**os.environ, "NORMREF_CANARY_CACHE": str(cache)}
    first = grader("--submissions", submitted_tree(tmp_path / "b1", {"ada": "correct"}), course=course_copy, env=env)
    assert first.returncode == 0 and "canary: the instructor's solutions scored full" in first.stdout, first.stderr
    again = grader("--submissions", submitted_tree(tmp_path / "b2", {"ada": "correct"}), course=other, env=env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "canary: skipped: " in again.stdout and f"({course_copy})" in again.stdout
    assert _grades(other) == _grades(course_copy)
    # the sandbox settings are in the key: a smaller memory cap is a new canary
    third = grader("--submissions", submitted_tree(tmp_path / "b3", {"bo": "correct"}), course=other,
                   env={**env, "NORMREF_KERNEL_MEM_MB": "2048"})
    assert third.returncode == 0 and "canary: the instructor's solutions scored full" in third.stdout, third.stderr


def test_over_an_existing_cluster_the_canary_runs_on_the_workers_and_catches_one_whose_kernels_differ(
        course_copy, tmp_path, monkeypatch):
    """The grader's own environment is sound; the one worker's kernels cannot import torch."""
    from services import dask_cluster

    only_assignments(course_copy, {"rmsnorm"})
    for k, v in NO_TORCH.items():  # the worker's environment only
        monkeypatch.setenv(k, v)
    with dask_cluster(n_workers=1) as cluster:
        for k in NO_TORCH:
            monkeypatch.delenv(k)
        out = grader("--submissions", submitted_tree(tmp_path / "in", {"ada": "correct"}), "--scheduler",
                     cluster.address, course=course_copy, env={**os.environ, "NORMREF_CANARY_CACHE": str(tmp_path)})
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert "canary: grading the instructor's solutions of 1 assignments on Dask worker tcp://127.0.0.1:" in out.stdout
    (line,) = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: canary on Dask worker tcp://127.0.0.1:") and "could not import torch" in line, line
    assert runs(course_copy)[-1]["status"] == "failed" and not (course_copy / "grades.csv").exists()


# -- the memory cap ---------------------------------------------------------------------------------

@contextlib.contextmanager
def _session(tmp_path: Path, monkeypatch, mem_mb: int, warm_kernels: bool):
    monkeypatch.setenv(warm.SWITCH, "1" if warm_kernels else "0")
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    try:
        with sandbox.SandboxSession(tmp_path / "course", mem_mb=mem_mb) as sb:
            args, env = sb.worker(0)
            for k, v in env.items():
                monkeypatch.setenv(k, v)
            sb.ipc = args[-1].split("=", 1)[1]
            yield sb
    finally:
        warm.stop_zygote()


@contextlib.contextmanager
def _kernel(sb, cwd: Path):
    """A grading kernel of the session's kernelspec: yields ``(run, km)``, ``run(code) -> output``."""
    from jupyter_client import KernelManager

    cwd.mkdir(parents=True, exist_ok=True)
    km = KernelManager(kernel_name=sandbox.KERNEL_NAME, transport="ipc", ip=sb.ipc)
    km.start_kernel(cwd=str(cwd), extra_arguments=["--HistoryManager.hist_file=:memory:"])
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=180)

        def run(code: str, timeout: float = 120) -> str:
            out = []

            def hook(msg):
                if msg["msg_type"] == "stream":
                    out.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    out.append("ERROR " + msg["content"]["ename"] + ": " + msg["content"]["evalue"])
            kc.execute_interactive(code, output_hook=hook, timeout=timeout)
            return "".join(out)

        run.client = kc
        yield run, km
    finally:
        kc.stop_channels()
        with contextlib.suppress(Exception):
            km.shutdown_kernel(now=True)


def _kernel_pid(km) -> int:
    """The kernel's pid as the host sees it (a warm kernel's from its provisioner; a fresh one is
    bubblewrap's grandchild: the python process below it)."""
    w = getattr(km.provisioner, "warm", None)
    if w is not None:
        return w.kernel_pid
    pids = [km.provisioner.process.pid]
    while True:
        kids = [int(p) for p in Path(f"/proc/{pids[-1]}/task/{pids[-1]}/children").read_text().split()]
        if not kids:
            return pids[-1]
        pids.append(kids[0])


@pytest.mark.parametrize("mode", ["fresh", "warm"])
def test_a_kernel_is_in_its_memory_cgroup_and_a_memory_hungry_cell_is_stopped_there(tmp_path, monkeypatch, mode):
    if not sandbox.memory_cgroups_work():
        pytest.skip("no writable cgroup v1 memory hierarchy here (needs root)")
    with _session(tmp_path, monkeypatch, 700, mode == "warm") as sb:
        assert sb.memory_cgroup is not None and sb.as_mb is None  # the cgroup caps memory, not RLIMIT_AS
        cwd = tmp_path / "course" / "autograded" / "hog" / "rmsnorm"
        with _kernel(sb, cwd) as (run, km):
            assert (getattr(km.provisioner, "warm", None) is not None) == (mode == "warm")
            pid = _kernel_pid(km)
            line = next(ln for ln in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if ":memory:" in ln)
            cg = sandbox.hierarchy("memory") / line.split(":", 2)[2].lstrip("/")
            assert cg.parent == sb.memory_cgroup and cg.name.startswith("kernel-"), line  # its own, in the run's
            assert int((cg / "memory.limit_in_bytes").read_text()) == 700 * 2**20
            # any torch imports (no address-space cap), and a cell may use memory below the cap
            assert run("import resource, torch\nprint(resource.getrlimit(resource.RLIMIT_AS)[0], "
                       "torch.ones(2**24).sum().item())") == f"{resource_infinity()} 16777216.0\n"
            assert sb.limits_hit() == {}
            run.client.execute("hog = bytearray(2 * 2**30)\nprint('survived')")
            deadline = time.monotonic() + 120
            while km.is_alive() and time.monotonic() < deadline:  # the kernel dies in this cell
                time.sleep(0.2)
            assert not km.is_alive()
            peak = sb.peak_memory_mb()[cwd]
            assert 600 < peak <= 700, peak  # it was stopped at the cap
            assert sb.limits_hit()[cwd] == ["hit the grading sandbox's memory cap (700 MiB per kernel): the kernel "
                                            "was killed by the out-of-memory killer while that cell ran"]
            flags = sandbox.limit_flags(tmp_path / "course", sb, [("rmsnorm", "hog")])
            assert flags[("rmsnorm", "hog")] == sb.limits_hit()[cwd]  # what the run's report and log say
    assert not cg.exists() and not sb.memory_cgroup.exists()  # removed with the session


def resource_infinity() -> int:
    import resource

    return resource.RLIM_INFINITY


def test_without_a_memory_controller_the_address_space_cap_is_what_a_kernel_maps_plus_the_allowance(
        tmp_path, monkeypatch):
    monkeypatch.setenv("NORMREF_MEMORY_CGROUP_ROOT", str(tmp_path / "none"))
    monkeypatch.delenv("NORMREF_KERNEL_AS_MB", raising=False)
    monkeypatch.setenv("NORMREF_CANARY_CACHE", str(tmp_path / "cache"))
    imports = sandbox.kernel_address_space_mb()
    assert json.loads((tmp_path / "cache" / "address-space.json").read_text())  # measured once, kept
    with _session(tmp_path, monkeypatch, 1024, False) as sb:
        assert sb.memory_cgroup is None and sb.as_mb == imports + 1024
        with _kernel(sb, tmp_path / "course" / "k") as (run, km):
            got = run("import resource, torch, normref\n"
                      "peak = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmPeak')][0]\n"
                      "print(resource.getrlimit(resource.RLIMIT_AS)[0] // 2**20, int(peak) // 1024)")
            cap, kernel_peak = map(int, got.split())
            assert cap == imports + 1024
            # the probe (an idle ipykernel with torch, outside the sandbox) maps about what this kernel does
            # (within 10%: this kernel has run a cell and imported normref since; seen 1057 vs 1056 MiB)
            assert 0.8 * imports <= kernel_peak <= 1.1 * imports, (imports, kernel_peak)
            assert run("x = bytearray(900 * 2**20)\nprint(len(x) // 2**20)") == "900\n"  # the allowance is there
            assert "MemoryError" in run("del x\ny = bytearray(1100 * 2**20)")  # the rest of it is not
            assert run("print(torch.ones(3).sum().item())") == "3.0\n"  # and the kernel goes on
