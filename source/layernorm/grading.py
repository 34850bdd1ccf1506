"""The ``layernorm`` assignment's grading (lesson 01, numpy): ``layer_norm``'s visible check (the
seed's two cases) and its full battery, drawn anew for every grading run."""
from grader.scoring.batteries import draw_norm_battery
from grader.scoring.questions import Assignment, battery, checker, visible
from normref.rules import NORM_REFERENCE

LAYER_NORM_BATTERY = battery("layer_norm_battery", checker("check_layer_norm", "numpy"),
                             lambda g: draw_norm_battery("layer", "numpy", g), NORM_REFERENCE, backend="numpy")

ASSIGNMENT = Assignment("layernorm", (
    visible("layer_norm_seed", LAYER_NORM_BATTERY, "check_layer_norm", "numpy", quick=True),
    LAYER_NORM_BATTERY,
))
