"""The job whose output a job reads (a training's privatization job); none for jobs that
read their corpus, as every job before this revision did.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("input_job_id", sa.String(32), nullable=True))
        b.create_index("ix_jobs_input_job_id", ["input_job_id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_index("ix_jobs_input_job_id")
        b.drop_column("input_job_id")
