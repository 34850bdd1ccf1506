"""A grading run's options are declared once (grader/options.py): the command line's flags and
grade_class's keyword arguments come from the same fields, and both refuse the same values with
the same words."""
import dataclasses
import inspect
from pathlib import Path

import pytest

from grader.__main__ import _grade_parser
from grader.options import GradeOptions, from_args
from grader.pipeline import grade_class


def _flags(parser) -> dict[str, str]:
    """``{dest: first option string}`` of every flag but --help."""
    return {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings and a.dest != "help"}


def test_every_option_is_a_flag_and_a_keyword_and_nothing_else_is():
    fields = {f.name for f in dataclasses.fields(GradeOptions)}
    api_only = {"progress", "command"}
    assert set(_flags(_grade_parser())) == fields - api_only
    params = inspect.signature(grade_class).parameters
    assert fields <= set(params) and set(params) - fields == {"options", "log"}
    assert all(params[f].kind is inspect.Parameter.KEYWORD_ONLY for f in fields)
    doc = inspect.getdoc(grade_class)
    assert all(f"{f}: " in doc for f in fields), "every option's help text is in grade_class's docstring"


def test_the_command_line_gives_the_options_grade_class_would_get(tmp_path):
    subs = tmp_path / "subs"
    ns = _grade_parser().parse_args(["--submissions", str(subs), "--jobs", "3", "--fresh", "--yes",
                                     "--duedate", "2026-11-21 09:00 UTC", "--duedate", "rmsnorm=2026-11-22 09:00 UTC",
                                     "--no-sandbox", "--cell-timeout", "30", "--no-groups", "--engine", "processes",
                                     "--db", "postgresql://u@h/db", "--course-root", str(tmp_path)])
    got = from_args(ns, progress=True)
    want = GradeOptions(submissions=subs, jobs=3, fresh=True, yes=True,
                        duedates={"*": "2026-11-21 09:00 UTC", "rmsnorm": "2026-11-22 09:00 UTC"},
                        use_sandbox=False, cell_timeout=30, groups=False, engine="processes",
                        db_url="postgresql://u@h/db", course_root=tmp_path, progress=True)
    assert got == want
    assert isinstance(got.submissions, Path) and isinstance(got.course_root, Path)


def test_flags_not_given_keep_the_declared_defaults():
    got = from_args(_grade_parser().parse_args([]))
    assert got == GradeOptions()
    assert (got.fresh, got.use_sandbox, got.groups, got.engine, got.duedates) == (None, None, True, "dask", {})


@pytest.mark.parametrize("kwargs, flags, words", [
    ({"jobs": 0}, ["--jobs", "0"], "--jobs must be at least 1"),
    ({"cell_timeout": 0}, ["--cell-timeout", "0"], "--cell-timeout must be at least 1"),
    ({"duedates": {"*": "tuesday-ish"}}, ["--duedate", "tuesday-ish"], "cannot read 'tuesday-ish' as a date"),
])
def test_the_api_and_the_command_line_refuse_a_value_with_the_same_words(kwargs, flags, words, capsys):
    with pytest.raises(ValueError, match=words):
        GradeOptions(**kwargs)
    with pytest.raises(ValueError, match=words):
        grade_class(**kwargs)  # refused before anything is read or written
    with pytest.raises(SystemExit) as stop:
        from grader.__main__ import main

        main(flags)
    assert stop.value.code == 2 and words in capsys.readouterr().err


def test_an_unknown_option_and_options_given_twice_are_refused():
    with pytest.raises(TypeError):
        grade_class(job=2)
    with pytest.raises(TypeError, match="not both"):
        grade_class(GradeOptions(), jobs=2)


def test_options_are_frozen_decisions_go_to_the_runs_findings():
    o = GradeOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.fresh = True
    assert o.replace(fresh=True).fresh is True and o.fresh is None
