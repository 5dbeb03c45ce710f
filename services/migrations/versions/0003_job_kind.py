"""The kind of a job (its entry in ``services.jobkinds``); existing jobs are privatizations.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("kind", sa.String(32), nullable=False, server_default="privatize"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_column("kind")
