"""The ``practice`` assignment's grading: eight short answers, each handed back as values and
checked by its :mod:`normref.answers` checker with the setting the notebook's visible check
passes (the graded questions' own numbers, not the lessons' worked ones); the written
explanation is graded by hand."""
from grader.scoring.questions import Assignment, short_answer

ASSIGNMENT = Assignment("practice", (
    short_answer("practice_mean_var", "check_mean_var", x=(1, 3, 5, 7)),
    short_answer("practice_layer_norm", "check_layer_norm_2244", x=(1, 3, 5, 7)),
    short_answer("practice_rms", "check_rms_34", x=(5, 12)),
    short_answer("practice_subtracts_mean", "check_rms_subtracts_mean", ask="shift_changes_output"),
    short_answer("practice_pre_ln_formula", "check_pre_ln_formula", sublayer="ffn"),
    short_answer("practice_shape", "check_norm_changes_shape", ask="keeps"),
    short_answer("trace_rms_shape", "check_rms_shape", x_shape=(4, 5, 6)),
    short_answer("retrieval_stats_axis", "check_stats_axis", layout="BDT"),
), manual=("practice_shape_why",))
