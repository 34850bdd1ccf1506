"""Write normref/checks/numpy_batteries.py: the numpy batteries of check_rms_norm and
check_layer_norm as torch builds them (normref.checks.norms.torch_battery), stored so that a
numpy check needs no torch. Run it after changing the battery; tests/test_checks.py fails while
the stored cases differ from torch's.

    python tools/numpy_batteries.py
"""
from __future__ import annotations

import base64
import io
import sys
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "normref" / "checks" / "numpy_batteries.py"

HEAD = '''"""The numpy batteries of :func:`~normref.checks.check_rms_norm` and
:func:`~normref.checks.check_layer_norm`: the torch battery's cases without bfloat16
(:func:`normref.checks.norms.torch_battery`), as numpy arrays, stored so that a numpy check (and
a numpy assignment's grading kernel) needs no torch. Written by ``tools/numpy_batteries.py``;
``tests/test_checks.py`` checks that they equal torch's, bit for bit.
"""
from __future__ import annotations

import base64

from .._syntax import load_npz

#: ``{{kind: [(case name, eps), ...]}}``, in the battery's order.
CASES = {cases}
#: Every case's ``x``, ``weight`` and ``bias`` (absent: None), an ``.npz`` in base64.
ARRAYS = (
{arrays})
_LOADED: dict = {{}}


def cases(kind: str) -> list[tuple]:
    """``[(name, x, weight, bias, eps), ...]`` of the ``kind`` (``"rms"`` or ``"layer"``) numpy
    battery: new arrays on every call (a student's function may modify what it is given)."""
    if not _LOADED:
        _LOADED.update(load_npz(base64.b64decode("".join(ARRAYS))))  # numpy parses headers: one thread at a time
    out = []
    for i, (name, eps) in enumerate(CASES[kind]):
        arrays = [_LOADED.get(f"{{kind}}{{i}}_{{part}}") for part in ("x", "weight", "bias")]
        out.append((name, *(None if a is None else a.copy() for a in arrays), eps))
    return out
'''


def main() -> None:
    from normref.checks.norms import torch_battery

    cases, arrays = {}, {}
    for kind in ("rms", "layer"):
        cases[kind] = []
        for i, c in enumerate(torch_battery(kind, "numpy")):
            cases[kind].append((c.name, c.eps))
            for part in ("x", "weight", "bias"):
                a = getattr(c, part)
                if a is not None:
                    arrays[f"{kind}{i}_{part}"] = a
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    text = base64.b64encode(buf.getvalue()).decode()
    lines = "\n".join(f'    "{ln}"' for ln in textwrap.wrap(text, 100))
    import pprint

    OUT.write_text(HEAD.format(cases=pprint.pformat(cases, width=110), arrays=lines))
    print(f"wrote {OUT} ({len(arrays)} arrays)")


if __name__ == "__main__":
    main()
