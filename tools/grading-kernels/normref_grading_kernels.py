"""The ``normref-warm`` kernel provisioner's entry point: :class:`grader.warm.WarmProvisioner`.

jupyter_client finds a kernelspec's provisioner by entry point (group
``jupyter_client.kernel_provisioners``), so it must be an installed distribution's; the grader
itself is not one (``pip install .`` gives students ``normref`` only). ``make install`` installs
this folder in editable mode, so this module stays here, two folders below the repository whose
``grader/`` it loads: in an ``nbgrader autograde`` worker, whose working directory is any course
root, ``grader`` need not be importable otherwise.
"""
import importlib
import importlib.util
import sys
from pathlib import Path

GRADER = Path(__file__).resolve().parents[2] / "grader"


def _grader_warm():
    if "grader" not in sys.modules:
        spec = importlib.util.spec_from_file_location("grader", GRADER / "__init__.py",
                                                      submodule_search_locations=[str(GRADER)])
        module = importlib.util.module_from_spec(spec)
        sys.modules["grader"] = module
        spec.loader.exec_module(module)
    return importlib.import_module("grader.warm")


def __getattr__(name: str):
    if name == "WarmProvisioner":
        return _grader_warm().WarmProvisioner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
