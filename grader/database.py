"""The gradebook's database: SQLite in the course root (nbgrader's default), or a server such as
PostgreSQL given as an SQLAlchemy URL (``--db``/``DB=``, nbgrader's ``CourseDirectory.db_url``).

:func:`check_url` is run before a grading run touches anything, so a wrong URL costs seconds and
one clear line; :func:`reset` is what ``--fresh`` does to a server gradebook (SQLite's is a file,
removed with the rest of the grading state).
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


__all__ = ["check_url", "reset", "redacted", "CONNECT_TIMEOUT_S"]
