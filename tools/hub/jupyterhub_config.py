"""JupyterHub configuration for the course: PAM users, one local server per user, run from the
shared student environment (docs/HUB.md, "Deploy on JupyterHub"; tests/test_hub.py runs the hub with it).

``make hub-env`` copies it to ``<prefix>/etc/jupyterhub/jupyterhub_config.py``; start the hub as
root with ``<prefix>/bin/jupyterhub -f <prefix>/etc/jupyterhub/jupyterhub_config.py`` (from the
folder that is to hold its database and cookie secret). Settings, from the environment:

- ``NORMREF_HUB_PREFIX``: the shared student environment (default ``/opt/normref-env``): every
  user's server is its ``bin/jupyterhub-singleuser``;
- ``NORMREF_HUB_BIND``: the hub's public URL (default ``http://127.0.0.1:8000``);
- ``NORMREF_INSTRUCTORS``: comma-separated unix user names who grade (hub admins). An
  instructor's server runs in the course folder, ``NORMREF_COURSE_DIR`` (relative to the
  instructor's home; default ``lesson16-normalization``), with ``jupyter-instructor/`` on
  ``JUPYTER_CONFIG_PATH``: formgrader is ``/user/<instructor>/formgrader``;
- ``NORMREF_LESSONS_REPO`` (optional): the git URL of the student repository (``make
  student-repo``). When set, a student's server opens on nbgitpuller's ``git-pull`` of it into
  ``~/lesson16-normalization`` (cloned the first time, merged afterwards, the student's own changes
  kept), then on ``notebooks/00_start.ipynb``; ``NORMREF_LESSONS_BRANCH`` (default ``main``);
- ``NORMREF_HUB_USERS`` (optional): comma-separated unix users allowed to log in, instructors
  included; without it every unix user who can log in with PAM may.

Every other user gets the hub student view, ``<prefix>/etc/jupyter-hub-student`` on
``JUPYTER_CONFIG_PATH``: the Assignment List (fetch, submit, fetch feedback) and Validate, no
formgrader, no Create Assignment, no course list.
"""
import os
import pwd
import urllib.parse

c = get_config()  # noqa: F821 - injected by traitlets when JupyterHub loads this file

prefix = os.environ.get("NORMREF_HUB_PREFIX", "/opt/normref-env")
instructors = {u.strip() for u in os.environ.get("NORMREF_INSTRUCTORS", "").split(",") if u.strip()}
course_dir = os.environ.get("NORMREF_COURSE_DIR", "lesson16-normalization")
lessons_repo = os.environ.get("NORMREF_LESSONS_REPO", "")
lessons_branch = os.environ.get("NORMREF_LESSONS_BRANCH", "main")
users = {u.strip() for u in os.environ.get("NORMREF_HUB_USERS", "").split(",") if u.strip()}

c.JupyterHub.bind_url = os.environ.get("NORMREF_HUB_BIND", "http://127.0.0.1:8000")
c.JupyterHub.authenticator_class = "pam"
c.JupyterHub.spawner_class = "localprocess"
if users:
    c.Authenticator.allowed_users = users | instructors
else:
    c.Authenticator.allow_all = True
c.Authenticator.admin_users = instructors
c.Spawner.cmd = [os.path.join(prefix, "bin", "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
# A cold JupyterLab on a loaded machine (a class logging in at 9:00) can take a while.
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120

#: Where nbgitpuller clones the lessons in a student's home.
LESSONS_DIR = "lesson16-normalization"


def lessons_url() -> str:
    """The student's landing URL: nbgitpuller's pull of the lessons, then the start notebook."""
    query = urllib.parse.urlencode({
        "repo": lessons_repo, "branch": lessons_branch, "targetpath": LESSONS_DIR,
        "urlpath": f"lab/tree/{LESSONS_DIR}/notebooks/00_start.ipynb"})
    return f"/git-pull?{query}"


def pre_spawn_hook(spawner):
    """Instructors: the server in the course folder, the instructor view. Students: the hub
    student view, and the lessons pulled at each start when ``NORMREF_LESSONS_REPO`` is set."""
    name = spawner.user.name
    if name in instructors:
        course = os.path.join(pwd.getpwnam(name).pw_dir, course_dir)
        # formgrader reads nbgrader_config.py from the server's working folder: the course's.
        spawner.cmd = ["env", "-C", course, os.path.join(prefix, "bin", "jupyterhub-singleuser")]
        spawner.notebook_dir = course
        spawner.environment["JUPYTER_CONFIG_PATH"] = os.path.join(course, "jupyter-instructor")
    else:
        spawner.environment["JUPYTER_CONFIG_PATH"] = os.path.join(prefix, "etc", "jupyter-hub-student")
        if lessons_repo:
            spawner.default_url = lessons_url()


c.Spawner.pre_spawn_hook = pre_spawn_hook
