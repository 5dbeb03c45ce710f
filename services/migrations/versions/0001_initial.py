"""Initial schema: tenants, API tokens, corpora, keys, jobs.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("storage_limit_bytes", sa.BigInteger, nullable=False),
        sa.Column("max_concurrent_jobs", sa.Integer, nullable=False),
        sa.Column("disabled_at", TS, nullable=True),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
    )
    op.create_index("ix_api_tokens_tenant_id", "api_tokens", ["tenant_id"])
    op.create_table(
        "corpora",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("records", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("storage_path", sa.String(1024), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_corpora_tenant_id", "corpora", ["tenant_id"])
    op.create_table(
        "keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("alphabet", sa.String(16), nullable=True),
        sa.Column("length", sa.Integer, nullable=True),
        sa.Column("label", sa.String(256), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("master_key_id", sa.String(16), nullable=True),
        sa.Column("wrapped_dek", sa.LargeBinary, nullable=True),
        sa.Column("material_ct", sa.LargeBinary, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("disabled_at", TS, nullable=True),
        sa.Column("destroyed_at", TS, nullable=True),
    )
    op.create_index("ix_keys_tenant_id", "keys", ["tenant_id"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("corpus_id", sa.String(32), sa.ForeignKey("corpora.id", ondelete="SET NULL"), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("ray_status", sa.String(16), nullable=True),
        sa.Column("message", sa.Text, nullable=True),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("spec_sha256", sa.String(64), nullable=False),
        sa.Column("key_ids", sa.Text, nullable=False),
        sa.Column("output_path", sa.String(1024), nullable=False),
        sa.Column("submit_attempts", sa.Integer, nullable=False),
        sa.Column("counts", sa.Text, nullable=True),
        sa.Column("output_bytes", sa.BigInteger, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("submitted_at", TS, nullable=True),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
    )
    op.create_index("ix_jobs_tenant_id", "jobs", ["tenant_id"])
    op.create_index("ix_jobs_corpus_id", "jobs", ["corpus_id"])
    op.create_index("ix_jobs_status", "jobs", ["status"])


def downgrade() -> None:
    op.drop_table("jobs")
    op.drop_table("keys")
    op.drop_table("corpora")
    op.drop_table("api_tokens")
    op.drop_table("tenants")
