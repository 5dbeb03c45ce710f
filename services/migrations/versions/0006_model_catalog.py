"""The base-model catalog (``catalog_models``): the operator's models and tenants' own
uploads, named in a training config as ``model.checkpoint: base:<name>``.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "catalog_models",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("storage_path", sa.String(1024), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("architecture", sa.String(128), nullable=True),
        sa.Column("source", sa.String(1024), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_catalog_models_tenant_id", "catalog_models", ["tenant_id"])
    op.create_index("ix_catalog_models_name", "catalog_models", ["name"])


def downgrade() -> None:
    op.drop_index("ix_catalog_models_name", "catalog_models")
    op.drop_index("ix_catalog_models_tenant_id", "catalog_models")
    op.drop_table("catalog_models")
