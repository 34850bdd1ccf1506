"""JupyterHub configuration for the course: PAM users, one local server per user, run from the
shared student environment (docs/HUB.md, "Deploy on JupyterHub"; tests/test_hub.py runs the hub with it).

``make hub-env`` copies it to ``<prefix>/etc/jupyterhub/jupyterhub_config.py``; start the hub as
root with ``<prefix>/bin/jupyterhub -f <prefix>/etc/jupyterhub/jupyterhub_config.py`` (from the
folder that is to hold its database and cookie secret, both created private to root, mode 600).
Settings, from the environment:

- ``NORMREF_HUB_USERS`` (required): comma-separated unix users allowed to log in (students;
  the instructors are added). Without it the hub does not start: PAM would let every user of
  the machine in;
- ``NORMREF_HUB_BIND``: the hub's public URL (default ``https://0.0.0.0:443``). ``https://``
  needs ``NORMREF_HUB_SSL_CERT`` and ``NORMREF_HUB_SSL_KEY`` (PEM files: the hub's proxy serves
  TLS with them). ``http://`` is accepted on a loopback address only (``http://127.0.0.1:8000``),
  for a TLS-terminating proxy in front on the same machine; anywhere else the hub does not start:
  passwords would cross the network in clear;
- ``NORMREF_HUB_PREFIX``: the shared student environment (default ``/opt/normref-env``): every
  user's server is its ``bin/jupyterhub-singleuser``, with its ``bin`` first on ``PATH`` (so
  ``python -m nbgrader validate ...`` works in a student's terminal);
- ``NORMREF_INSTRUCTORS``: comma-separated unix user names who grade (hub admins). An
  instructor's server runs in the course folder, ``NORMREF_COURSE_DIR`` (relative to the
  instructor's home; default ``lesson16-normalization``), with ``jupyter-instructor/`` on
  ``JUPYTER_CONFIG_PATH``: formgrader is ``/user/<instructor>/formgrader``, also framed by
  **Nbgrader ▸ Formgrader**;
- ``NORMREF_LESSONS_REPO`` (optional): the git URL of the student repository (``make
  student-repo HUB=1``). When set, a student's server opens on nbgitpuller's ``git-pull`` of it
  into ``~/lesson16-normalization`` (cloned the first time, merged afterwards, the student's own
  changes kept), then on ``notebooks/00_start.ipynb``; ``NORMREF_LESSONS_BRANCH`` (default ``main``).

Every other user gets the hub student view, ``<prefix>/etc/jupyter-hub-student`` on
``JUPYTER_CONFIG_PATH``: the Assignment List (fetch, submit, fetch feedback) and Validate, no
formgrader, no Create Assignment, no course list.
"""
import ipaddress
import os
import pwd
import sys
import urllib.parse

c = get_config()  # noqa: F821 - injected by traitlets when JupyterHub loads this file


def refuse(why: str) -> None:
    """Stop the hub before it starts, with one line saying what to set."""
    print(f"jupyterhub_config.py: {why} (docs/HUB.md)", file=sys.stderr)
    sys.exit(1)


prefix = os.environ.get("NORMREF_HUB_PREFIX", "/opt/normref-env")
instructors = {u.strip() for u in os.environ.get("NORMREF_INSTRUCTORS", "").split(",") if u.strip()}
course_dir = os.environ.get("NORMREF_COURSE_DIR", "lesson16-normalization")
lessons_repo = os.environ.get("NORMREF_LESSONS_REPO", "")
lessons_branch = os.environ.get("NORMREF_LESSONS_BRANCH", "main")
users = {u.strip() for u in os.environ.get("NORMREF_HUB_USERS", "").split(",") if u.strip()}

bind = os.environ.get("NORMREF_HUB_BIND", "https://0.0.0.0:443")
cert, key = os.environ.get("NORMREF_HUB_SSL_CERT", ""), os.environ.get("NORMREF_HUB_SSL_KEY", "")

if not users:
    refuse("set NORMREF_HUB_USERS to the students allowed to log in (comma-separated unix users): "
           "without it every user of this machine could")
url = urllib.parse.urlsplit(bind)
if url.scheme == "https":
    if not (cert and key):
        refuse(f"NORMREF_HUB_BIND={bind} needs NORMREF_HUB_SSL_CERT and NORMREF_HUB_SSL_KEY (the "
               "certificate and its key, PEM files)")
    for path in (cert, key):
        if not os.path.isfile(path):
            refuse(f"no such file: {path}")
    c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = cert, key
elif url.scheme == "http":
    try:
        loopback = ipaddress.ip_address(url.hostname or "").is_loopback
    except ValueError:
        loopback = url.hostname == "localhost"
    if not loopback:
        refuse(f"NORMREF_HUB_BIND={bind} would send passwords in clear: use https:// with "
               "NORMREF_HUB_SSL_CERT and NORMREF_HUB_SSL_KEY, or http://127.0.0.1:PORT behind a "
               "TLS-terminating proxy on this machine")
else:
    refuse(f"NORMREF_HUB_BIND={bind}: not an http:// or https:// URL")
c.JupyterHub.bind_url = bind

# The hub's database and cookie secret, in the folder it starts from, private to root (mode 600):
# JupyterHub creates the secret so, but its SQLite database with the umask's mode (644).
DB = os.path.abspath("jupyterhub.sqlite")
os.close(os.open(DB, os.O_CREAT | os.O_WRONLY, 0o600))
os.chmod(DB, 0o600)
c.JupyterHub.db_url = f"sqlite:///{DB}"
c.JupyterHub.cookie_secret_file = os.path.abspath("jupyterhub_cookie_secret")

c.JupyterHub.authenticator_class = "pam"
c.JupyterHub.spawner_class = "localprocess"
c.Authenticator.allowed_users = users | instructors
c.Authenticator.admin_users = instructors
c.Spawner.cmd = [os.path.join(prefix, "bin", "jupyterhub-singleuser")]
# The environment's own python, jupyter and nbgrader first in every user's terminal.
c.Spawner.environment = {"PATH": os.pathsep.join([os.path.join(prefix, "bin"), "/usr/local/bin", "/usr/bin",
                                                  "/bin"])}
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
        spawner.environment = {**spawner.environment, "JUPYTER_CONFIG_PATH": os.path.join(course, "jupyter-instructor")}
    else:
        spawner.environment = {**spawner.environment,
                               "JUPYTER_CONFIG_PATH": os.path.join(prefix, "etc", "jupyter-hub-student")}
        if lessons_repo:
            spawner.default_url = lessons_url()


c.Spawner.pre_spawn_hook = pre_spawn_hook
