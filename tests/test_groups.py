"""Groups of wrong answers (grader/outputs/groups.py) from the outputs the scoring stage recorded.

The autograded notebooks are made in this process (tests/autograded.py): the layernorm source
notebook with each student's answer, and the hand-back output a kernel would show for the
run's drawn inputs, scored as the scoring stage scores them (the records kept). The groups are then
read with every way of starting a kernel or a process made to raise.
"""
from __future__ import annotations

import json
import subprocess

import nbformat
import pytest
from autograded import write_autograded

from grader.outputs.groups import handed_back_name, mistake_groups, question_records, unrecorded_questions

HEAD = "def layer_norm(x, weight, bias, eps=1e-5):\n"
#: (x_hat + beta) * gamma, written two ways; the one-pass variance; an honest answer.
BIAS_INSIDE_1 = HEAD + ("    h = x.astype(np.float32)\n    m = h.mean(-1, keepdims=True)\n"
                        "    v = ((h - m) ** 2).mean(-1, keepdims=True)\n"
                        "    return (((h - m) / np.sqrt(v + eps) + bias) * weight).astype(x.dtype)\n")
BIAS_INSIDE_2 = HEAD + ("    xf = x.astype(np.float32)\n    mu = np.mean(xf, axis=-1, keepdims=True)\n"
                        "    y = (xf - mu) / np.sqrt(np.var(xf, axis=-1, keepdims=True) + eps)\n"
                        "    y = y + bias\n    return (y * weight).astype(x.dtype)\n")
ONE_PASS = HEAD + ("    h = x.astype(np.float32)\n    m = h.mean(-1, keepdims=True)\n"
                   "    v = (h * h).mean(-1, keepdims=True) - m * m\n"
                   "    return ((h - m) / np.sqrt(v + eps) * weight + bias).astype(x.dtype)\n")
HONEST = HEAD + ("    h = x.astype(np.float64)\n"
                 "    y = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + eps)\n"
                 "    return (y * weight + bias).astype(x.dtype)\n")
SEED = 20261201


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("groups") / "course"
    students = {"ann": BIAS_INSIDE_1, "bob": BIAS_INSIDE_2, "cat": ONE_PASS, "dan": HONEST}
    for s, src in students.items():
        write_autograded(root, "layernorm", s, {"layer_norm_impl": src}, SEED)
    return root


def _no_kernel(monkeypatch):
    """Every way to run student code again: a Jupyter kernel, the grading sandbox, a process."""
    import jupyter_client

    from grader.kernel import sandbox

    def refuse(*a, **k):
        raise AssertionError("the groups started a kernel or a process")

    monkeypatch.setattr(jupyter_client.KernelManager, "start_kernel", refuse)
    monkeypatch.setattr(sandbox.SandboxSession, "__init__", refuse)
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


def test_one_variant_written_two_ways_is_one_group_and_no_kernel_starts(course, monkeypatch):
    _no_kernel(monkeypatch)
    groups, missing = mistake_groups(course, ["layernorm"], ["ann", "bob", "cat", "dan"])
    gs = groups["layernorm"]
    assert [(g.check, g.students) for g in gs] == [("layer_norm_battery", ["ann", "bob"]),
                                                    ("layer_norm_battery", ["cat"])]
    bias, one_pass = gs
    assert (bias.size, bias.representative, bias.cell) == (2, "ann", BIAS_INSIDE_1.rstrip("\n"))
    assert bias.variant == "bias=inside" and bias.checker == "layer_norm"
    assert bias.diagnosis.startswith("you added the bias before multiplying by the weight, (xhat + beta) * gamma")
    # the battery's float16 case exposes the one-pass variance, and only that case fails
    assert (one_pass.variant, one_pass.failed, one_pass.cases) == ("var_formula=one_pass", 1, 6)
    assert "E[x**2] - E[x]**2" in one_pass.diagnosis and one_pass.cell == ONE_PASS.rstrip("\n")
    assert [g.group_id for g in gs] == ["layernorm-layer-norm-1", "layernorm-layer-norm-2"]
    assert missing == {}


def test_the_record_is_in_the_test_cell_and_its_notebook_is_strict_json(course):
    path = course / "autograded" / "cat" / "layernorm" / "layernorm.ipynb"
    json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the notebook"))
    recs = question_records(nbformat.read(path, as_version=4))
    assert set(recs) == {"layer_norm_battery"}  # the visible check has no record: public cases
    rec, name = recs["layer_norm_battery"]
    assert name == "layer_norm" and rec["checker"] == "layer_norm" and len(rec["cases"]) == 6
    assert [c["passed"] for c in rec["cases"]] == [True, True, True, True, False, True]


def test_a_nan_output_is_kept_as_text(tmp_path):
    nan = HEAD + "    return (x * np.nan).astype(x.dtype)\n"
    write_autograded(tmp_path, "layernorm", "eve", {"layer_norm_impl": nan}, SEED)
    path = tmp_path / "autograded" / "eve" / "layernorm" / "layernorm.ipynb"
    json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the notebook"))
    rec, _ = question_records(nbformat.read(path, as_version=4))["layer_norm_battery"]
    assert rec["cases"][0]["got"] == ["nan", "nan", "nan"]  # the drawn token: three values


def test_answers_graded_on_another_run_s_inputs_are_grouped_apart(course, tmp_path):
    import shutil

    root = tmp_path / "course"
    shutil.copytree(course, root)
    write_autograded(root, "layernorm", "eve", {"layer_norm_impl": BIAS_INSIDE_2}, SEED + 1)
    groups, missing = mistake_groups(root, ["layernorm"], ["ann", "bob", "cat", "dan", "eve"])
    assert [g.students for g in groups["layernorm"]] == [["ann", "bob"], ["cat"], ["eve"]]
    assert missing == {"layernorm: layer_norm_battery": "graded on the inputs of 2 runs: wrong answers are "
                       "grouped within each run's inputs"}


def test_questions_scored_in_the_kernel_are_named_not_grouped():
    cells = [nbformat.v4.new_code_cell(src, metadata={"nbgrader": {"grade": True, "grade_id": gid, "points": 1}})
             for gid, src in [("my_block_battery", "battery = check_pre_ln_block(PreNormBlock)"),
                              ("my_block_quick", "quick = check_pre_ln_block(PreNormBlock, quick=True)"),
                              ("pre_ln_battery", "check_pre_ln(pre_ln)\nhand_back(\"pre_ln_battery\", pre_ln)"),
                              ("practice_rms", "round(1 * check_rms_34(rms_5_12, x=(5, 12)).score, 2)")]]
    nb = nbformat.v4.new_notebook(cells=cells)
    assert unrecorded_questions(nb) == ["my_block_battery"]
    assert question_records(nb) == {}  # no scoring output yet
    assert handed_back_name(cells[2].source, "pre_ln_battery") == "pre_ln"
    assert handed_back_name(cells[0].source, "my_block_battery") == "PreNormBlock"


def test_passed_cases_and_errors_against_a_student_s_own_reference_agree():
    """A block run with each student's own submodules has a reference of its own per student
    (their random weights): a passed case agrees whatever its outputs; a failed one agrees
    when the errors (output minus reference) agree."""
    from normref.diagnosis.record import agree

    def rec(got, want, passed):
        return {"inputs": "r1", "cases": [{"passed": passed, "fault": None if passed else "wrong_values",
                                           "got": got, "want": want, "rtol": 1e-5, "atol": 1e-5}]}

    assert agree(rec([1.0, 2.0], [1.0, 2.0], True), rec([5.0, 7.0], [5.0, 7.0], True))
    # errors +0.5 on the first value against references [1, 2] and [5, 7]: one mistake
    assert agree(rec([1.5, 2.0], [1.0, 2.0], False), rec([5.5, 7.0], [5.0, 7.0], False))
    assert not agree(rec([1.5, 2.0], [1.0, 2.0], False), rec([5.0, 7.5], [5.0, 7.0], False))
    # one reference for both: the outputs themselves are compared (0.5 apart: two mistakes)
    assert not agree(rec([1.5, 2.0], [1.0, 2.0], False), rec([1.0, 2.5], [1.0, 2.0], False))
    assert not agree(rec([1.5, 2.0], [1.0, 2.0], False), {**rec([1.5, 2.0], [1.0, 2.0], False), "inputs": "r2"})
