"""The privacy ledger: each training's spend on the corpus its data came from
(``privacy_spends``), and a tenant's limit per corpus.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as b:
        b.add_column(sa.Column("max_epsilon_per_corpus", sa.Float(), nullable=True))
    op.create_table(
        "privacy_spends",
        sa.Column("job_id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("corpus_sha256", sa.String(64), nullable=False),
        sa.Column("corpus_id", sa.String(32), nullable=True),
        sa.Column("base_training_id", sa.String(32), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("noise_multiplier", sa.Float(), nullable=True),
        sa.Column("sample_rate", sa.Float(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("planned_steps", sa.Integer(), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("unit_delta", sa.Float(), nullable=True),
        sa.Column("unit", sa.String(16), nullable=False),
        sa.Column("group_size", sa.Integer(), nullable=False),
        sa.Column("accountant", sa.String(8), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("settled_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_privacy_spends_tenant_id", "privacy_spends", ["tenant_id"])
    op.create_index("ix_privacy_spends_corpus_sha256", "privacy_spends", ["corpus_sha256"])


def downgrade() -> None:
    op.drop_index("ix_privacy_spends_corpus_sha256", "privacy_spends")
    op.drop_index("ix_privacy_spends_tenant_id", "privacy_spends")
    op.drop_table("privacy_spends")
    with op.batch_alter_table("tenants") as b:
        b.drop_column("max_epsilon_per_corpus")
