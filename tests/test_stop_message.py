"""What `make grade` says when it is stopped (Ctrl-C, SIGTERM) part way (red team, the tired
instructor): it used to say "the autograde workers were stopped" whichever stage was running
(a stop during export said so too), and "finish the batch" for the demo class, which starts over."""
import pytest

import grader.__main__ as entry
import grader.demo
import grader.pipeline


@pytest.mark.parametrize("submissions", [True, False])
def test_a_stopped_run_says_what_the_next_run_does(tmp_path, monkeypatch, capsys, submissions):
    def stopped(*options, **kwargs):
        raise KeyboardInterrupt()

    monkeypatch.setattr(entry, "_stop_on_signals", lambda: None)
    monkeypatch.setattr(grader.pipeline, "grade_class", stopped)
    monkeypatch.setattr(grader.demo, "demo_course", lambda root: tmp_path)
    argv = ["--course-root", str(tmp_path)] + (["--submissions", str(tmp_path / "subs")] if submissions else [])
    assert entry.main(argv) == 130
    err = capsys.readouterr().err
    assert "autograde workers were stopped" not in err  # not what a stop during export did
    assert err.startswith("stopped (SIGINT) before the run finished"), err
    if submissions:
        assert "run the same command again to finish the batch (what was graded is kept)" in err, err
    else:
        assert "run the same command again to grade the demo class again (it starts over)" in err, err
