"""Audit log; per-job input bytes and quarantined records (for the metrics).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("at", TS, nullable=False),
        sa.Column("tenant_id", sa.String(32), nullable=True),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("resource_type", sa.String(16), nullable=True),
        sa.Column("resource_id", sa.String(64), nullable=True),
        sa.Column("status", sa.Integer, nullable=True),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("client", sa.String(64), nullable=True),
        sa.Column("detail", sa.Text, nullable=True),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at"])
    op.create_index("ix_audit_events_tenant_id", "audit_events", ["tenant_id"])
    op.create_index("ix_audit_events_resource_id", "audit_events", ["resource_id"])
    op.create_index("ix_audit_events_request_id", "audit_events", ["request_id"])
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("input_bytes", sa.BigInteger, nullable=False, server_default="0"))
        b.add_column(sa.Column("quarantined_records", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_column("quarantined_records")
        b.drop_column("input_bytes")
    op.drop_table("audit_events")
