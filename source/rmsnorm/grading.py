"""The ``rmsnorm`` assignment's grading (lesson 02, the seed's build challenge): ``rms_norm``'s
visible check (the seed's two cases) and its full battery, drawn anew for every grading run."""
from grader.scoring.batteries import draw_norm_battery
from grader.scoring.questions import Assignment, battery, checker, visible
from normref.rules import NORM_REFERENCE

RMS_NORM_BATTERY = battery("rms_norm_battery", checker("check_rms_norm"),
                           lambda g: draw_norm_battery("rms", "torch", g), NORM_REFERENCE)

ASSIGNMENT = Assignment("rmsnorm", (
    visible("rms_norm_shape", RMS_NORM_BATTERY, "check_rms_norm", quick=True),
    RMS_NORM_BATTERY,
))
