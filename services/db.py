"""Engine, sessions and migrations.

SQLite (the embedded default) runs in WAL mode with foreign keys on and
``secure_delete`` on, so a destroyed key's enveloped material is overwritten in the
file rather than left in a free page. PostgreSQL works by URL
(``postgresql+psycopg://...``)."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def make_engine(url: str, pool_size: int = 40, busy_timeout_s: float = 30.0, connect_timeout_s: int = 10) -> Engine:
    """An engine whose pool keeps up to ``pool_size`` connections (plus 10 transient ones);
    on SQLite a write waits up to ``busy_timeout_s`` for another connection's lock; on
    PostgreSQL a connection that is not made in ``connect_timeout_s`` fails (libpq waits for
    good by default: a server that accepts and never answers held every request)."""
    u = make_url(url)
    pool = {"pool_size": pool_size, "max_overflow": 10}
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            Path(u.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": busy_timeout_s}, **pool)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # pragma: no cover - exercised by every test
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA secure_delete=ON")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
            cur.close()

        return engine
    connect_args = {"connect_timeout": connect_timeout_s} if u.get_backend_name() == "postgresql" else {}
    return create_engine(url, pool_pre_ping=True, connect_args=connect_args, **pool)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]):
    """A session that commits on success and rolls back on error."""
    s = factory()
    try:
        yield s
        s.commit()
    except BaseException:
        s.rollback()
        raise
    finally:
        s.close()


def checkpoint_sqlite(engine: Engine, attempts: int = 20) -> bool:
    """After deleting secrets from SQLite: copy the WAL into the database file and
    truncate the WAL, so no old page version holding them survives in ``-wal``
    (``secure_delete`` has already zeroed the freed space in the main file). True when
    the checkpoint completed; a no-op on other databases."""
    import time

    from sqlalchemy import text

    if engine.url.get_backend_name() != "sqlite":
        return True
    for _ in range(attempts):
        with engine.connect() as conn:
            busy, _, _ = conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)")).one()
        if not busy:
            return True
        time.sleep(0.05)
    log.warning("SQLite checkpoint stayed busy; the WAL keeps old pages until the next checkpoint")
    return False


def alembic_config():
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` (Alembic upgrade)."""
    from alembic import command

    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    log.info("database schema at %s", revision)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
