"""The ``normref-warm`` kernel provisioner's entry point: :class:`grader.kernel.warm.WarmProvisioner`.

jupyter_client finds a kernelspec's provisioner by entry point (group
``jupyter_client.kernel_provisioners``), so it must be an installed distribution's; the grader
itself is not one (``pip install .`` gives students ``normref`` only). ``make install`` installs
this module into ``.venv`` (not editable) beside the course's editable ``normref``, whose ``.pth``
puts the course folder on every ``.venv`` process's ``sys.path`` (pyproject.toml), so ``grader``
imports from any working directory (an ``nbgrader autograde`` worker's is a course root).
"""


def __getattr__(name: str):
    if name == "WarmProvisioner":
        from grader.kernel.warm import WarmProvisioner

        return WarmProvisioner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
