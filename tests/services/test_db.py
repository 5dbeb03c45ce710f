"""The Alembic revisions build exactly the schema the models describe, on SQLite and on
the PostgreSQL of ``PRIVATIZE_TEST_DATABASE_URL`` (in a fresh schema; required in CI)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

import os
import secrets

import pytest
from sqlalchemy import create_engine, text

from services.db import current_revision, make_engine, migrate
from services.models import Base
from tests.conftest import need


@pytest.fixture
def pg_engine():
    url = os.environ.get("PRIVATIZE_TEST_DATABASE_URL")
    need(bool(url), "PostgreSQL: set PRIVATIZE_TEST_DATABASE_URL (.ci/run starts one)")
    schema = f"m_{secrets.token_hex(4)}"
    admin = create_engine(url)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    engine = create_engine(url, connect_args={"options": f"-csearch_path={schema}"})
    try:
        yield engine
    finally:
        engine.dispose()
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def test_migrations_match_the_models_on_postgresql(pg_engine):
    migrate(pg_engine)
    assert current_revision(pg_engine) == "0006"
    with pg_engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert [d for d in diff if d[0] not in ("modify_default", "modify_comment")] == []
    assert "audit_events" in inspect(pg_engine).get_table_names()


def test_migrations_match_the_models(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    migrate(engine)
    assert current_revision(engine) == "0006"
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    # SQLite reports no server defaults or comments; anything else is a real drift
    assert [d for d in diff if d[0] not in ("modify_default", "modify_comment")] == []
    assert set(inspect(engine).get_table_names()) >= {"tenants", "api_tokens", "corpora", "keys", "jobs"}
    migrate(engine)  # idempotent


def test_downgrade_and_upgrade_again(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    migrate(engine)
    from alembic import command

    from services.db import alembic_config

    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    assert "tenants" not in inspect(engine).get_table_names()
    migrate(engine)
    assert "tenants" in inspect(engine).get_table_names()


def test_a_postgresql_server_that_never_answers_fails_the_connection_in_its_timeout(silent_port):
    """libpq waits for good by default; the engine's ``connect_timeout`` bounds it (a
    listening socket that never answers stands for a hung server)."""
    import time

    from sqlalchemy.exc import OperationalError

    engine = make_engine(f"postgresql+psycopg://u@127.0.0.1:{silent_port}/db", connect_timeout_s=2)
    t0 = time.monotonic()
    with pytest.raises(OperationalError, match="timeout"):
        engine.connect()
    assert time.monotonic() - t0 < 8
    engine.dispose()
