"""The Alembic revisions build exactly the schema the models describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from services.db import current_revision, make_engine, migrate
from services.models import Base


def test_migrations_match_the_models(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    migrate(engine)
    assert current_revision(engine) == "0001"
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
