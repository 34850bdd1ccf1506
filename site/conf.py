"""Sphinx configuration of the course website (``make site`` -> ``build/site/``).

Read by ``tools/build_site.py``, which stages the pages beside this file in a build folder: the
lesson notebooks (``notebooks/*.ipynb``, executed at build time by MyST-NB, so every figure,
number and takeaway is what the lesson computes) and the assignments' student versions
(``release/<a>/<a>.ipynb``, shown as they are, never executed, never ``source/``). What the
build is told (the student repository the launch buttons open, the JupyterHub) it writes to
``site_settings.json`` beside this file.

Theme: the Sphinx Book Theme (Jupyter Book 1's theme): launch buttons (Binder; the course's
JupyterHub through nbgitpuller), a search box, previous/next links. MathJax is served from the
site itself (npm ``mathjax``, copied by the build), so no page loads anything from elsewhere.
"""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SETTINGS = json.loads((HERE / "site_settings.json").read_text())

project = "Normalize across features, one token at a time"
author = "Lesson 16 of a transformer course"
copyright = "the course's authors"  # noqa: A001  (Sphinx's name for it)
language = "en"

extensions = ["myst_nb"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
exclude_patterns = ["_build", "site_settings.json", "**.ipynb_checkpoints"]
suppress_warnings = ["mystnb.unknown_mime_type"]

# The lessons run at build time, every time (no cache: normref's code is part of what they show).
nb_execution_mode = "force"
nb_execution_excludepatterns = ["release/*/*.ipynb"]
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_kernel_rgx_aliases = {".*": "python3"}
# Widgets: the static form each widget puts in its output (normref.static_widgets), never the
# widget view, which needs a kernel (and ipywidgets' JavaScript from a CDN).
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
nb_ipywidgets_js = {}
nb_merge_streams = True

html_theme = "sphinx_book_theme"
html_title = "Lesson 16 · Normalization in the transformer block"
html_static_path = ["_static"]
templates_path = ["_templates"]
html_css_files = ["course.css"]
html_js_files = ["course.js"]
html_favicon = "_static/favicon.svg"
mathjax_path = "mathjax/tex-svg.js"
html_last_updated_fmt = None
html_copy_source = True  # the download button offers each page's notebook (release/ only for assignments)
html_sourcelink_suffix = ""
html_show_sourcelink = False

_repo = SETTINGS["repo"]
_launch = {"binderhub_url": "https://mybinder.org", "notebook_interface": "jupyterlab"}
if SETTINGS.get("hub_url"):
    _launch["jupyterhub_url"] = SETTINGS["hub_url"]
html_theme_options = {
    "repository_url": f"https://github.com/{_repo}",
    "repository_branch": SETTINGS.get("branch", "main"),
    "path_to_docs": "",
    "use_repository_button": True,
    "use_download_button": True,
    "launch_buttons": _launch,
    "show_prev_next": True,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "extra_footer": ("Built from the course's repository with Sphinx, MyST-NB and the Sphinx Book Theme; "
                     "the lessons were run when this site was built."),
}
# The figures are drawn on white: the light theme, unless the reader picks another (pydata-sphinx-theme
# reads it from html_context; without it every page logs "Got invalid theme mode" as a console error).
html_context = {"default_mode": "light"}
