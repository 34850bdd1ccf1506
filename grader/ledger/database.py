"""The gradebook's database: SQLite in the course root (nbgrader's default), or a server such as
PostgreSQL given as an SQLAlchemy URL (``--db``/``DB=``, nbgrader's ``CourseDirectory.db_url``).

:func:`check_url` is run before a grading run touches anything, so a wrong URL costs seconds and
one clear line; :func:`reset` is what ``--fresh`` does to a server gradebook (SQLite's is a file,
removed with the rest of the grading state); :func:`create_gradebook` makes a new gradebook as
nbgrader would, without nbgrader's ``alembic heads`` subprocess.
"""
from __future__ import annotations

#: Seconds to wait for a database server to answer.
CONNECT_TIMEOUT_S = 5


def redacted(url: str) -> str:
    """``url`` with its password hidden, for messages and logs."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL at all: show it as given
        return url


def check_url(url: str) -> None:
    """Connect to the gradebook database at ``url`` once, read nothing, write nothing.

    A server database must exist already (``createdb NAME``); nbgrader creates its tables in it
    on first use, as it does for SQLite.

    Raises:
        ValueError: one line naming the URL (password hidden) and what is wrong: not an
            SQLAlchemy URL, no driver for it here, or the server refused or did not answer within
            :data:`CONNECT_TIMEOUT_S` seconds (a wrong host, port, user or database name).
    """
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, SQLAlchemyError

    shown = redacted(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValueError(f"gradebook database {url!r} is not a database URL (e.g. "
                         "postgresql://USER@HOST:5432/DBNAME or sqlite:////path/gradebook.db)") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        from pathlib import Path

        path = Path(parsed.database)
        if not path.exists():  # nbgrader creates it; opening it here would create it now
            if not path.parent.is_dir():
                raise ValueError(f"cannot open the gradebook database {shown}: no folder {path.parent}")
            return
    args = {"connect_timeout": CONNECT_TIMEOUT_S} if parsed.get_backend_name() == "postgresql" else {}
    try:
        engine = create_engine(parsed, connect_args=args)
    except (NoSuchModuleError, ModuleNotFoundError, ImportError) as e:
        raise ValueError(f"gradebook database {shown}: no database driver for it here ({_one_line(e)})") from None
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as e:
        raise ValueError(f"cannot open the gradebook database {shown}: {_one_line(e.orig or e)}") from None
    except SQLAlchemyError as e:
        raise ValueError(f"cannot open the gradebook database {shown}: {_one_line(e)}") from None
    finally:
        engine.dispose()


def alembic_head() -> str:
    """The newest revision of nbgrader's gradebook migrations, e.g. ``"e43177bfe90b"``: what
    ``alembic heads`` prints for nbgrader's alembic folder (read with alembic's Python API)."""
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    return ScriptDirectory(ALEMBIC_DIR).get_current_head()


def create_gradebook(url: str, version: str | None = None) -> bool:
    """Create nbgrader's gradebook in the database at ``url`` if it has no tables yet: nbgrader's
    tables and the ``alembic_version`` stamp, as ``nbgrader.api.Gradebook`` does on first use,
    but in this process (nbgrader runs ``alembic heads`` as a subprocess for the stamp: 1.5-4 s
    per new gradebook). A gradebook that has tables is left as it is.

    Args:
        url: an SQLAlchemy URL (SQLite: the file is created, its folder must exist; PostgreSQL:
            the database must exist).
        version: the alembic revision to stamp (default: :func:`alembic_head`).

    Returns:
        True if it was created here, False if the database already had tables.
    """
    from nbgrader.api import Base
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(url)
    try:
        with engine.begin() as conn:  # one transaction: a half-made gradebook is never left
            if inspect(conn).get_table_names():
                return False
            version = version or alembic_head()
            Base.metadata.create_all(conn)
            conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
            conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": version})
    finally:
        engine.dispose()
    return True


def reset(url: str) -> None:
    """Drop nbgrader's tables (and its alembic stamp) from the database at ``url``: a fresh start
    for a server gradebook; nbgrader creates them again on first use. Other tables are kept."""
    from nbgrader.api import Base
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        Base.metadata.drop_all(engine)
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    finally:
        engine.dispose()


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300] or type(e).__name__


__all__ = ["alembic_head", "check_url", "create_gradebook", "reset", "redacted", "CONNECT_TIMEOUT_S"]
