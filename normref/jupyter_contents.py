"""The student's Jupyter server opens a course notebook as the kernel will describe it, so that
opening a lesson or an assignment does not mark it changed.

When a kernel connects, JupyterLab writes the kernel's ``language_info`` (its Python version
among others) into the notebook's metadata; a notebook whose committed ``language_info`` differs
in any field is then marked unsaved, and autosave rewrites the tracked ``.ipynb`` a minute later
(so the student's next ``git pull`` or nbgitpuller sync conflicts). The committed notebooks carry
``{"name": "python"}`` only, since the Python version differs from machine to machine (Binder's
conda ``python=3.11``, a hub's, a laptop's). :class:`CourseContentsManager` hands JupyterLab each
``python3`` notebook with the ``language_info`` of this server's own Python, which is the kernel's
(the course's ``python3`` kernel runs in the server's environment): JupyterLab then finds nothing
to change. The file on disk is untouched; a notebook the student saves gets the same metadata
JupyterLab would have written anyway.

Configured in ``jupyter-student/jupyter_server_config.json`` and the hub's
(``ServerApp.contents_manager_class``).
"""
from __future__ import annotations

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

__all__ = ["CourseContentsManager", "kernel_language_info"]


def kernel_language_info() -> dict:
    """The ``language_info`` an ipykernel of this Python sends in its ``kernel_info_reply``."""
    from ipykernel.ipkernel import IPythonKernel

    return dict(IPythonKernel.language_info)


class CourseContentsManager(AsyncLargeFileManager):
    """jupyter_server's default contents manager, with :func:`kernel_language_info` filled into
    every notebook whose kernelspec is ``python3`` and whose language is Python."""

    async def get(self, path, content=True, type=None, format=None, **kwargs):
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if content and model.get("type") == "notebook" and model.get("content") is not None:
            meta = model["content"]["metadata"]
            info = meta.get("language_info") or {}
            if meta.get("kernelspec", {}).get("name") == "python3" and info.get("name", "python") == "python":
                meta["language_info"] = kernel_language_info()
        return model
