"""daily: pull requests compared with their base; jobs carry their trigger; check-run policy

Revision ID: 0010_daily
Revises: 0009_security
Create Date: 2026-11-22

New nullable columns and one new table only: existing rows keep working.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_daily"
down_revision = "0009_security"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("trigger", sa.String(length=32), nullable=True))
    with op.batch_alter_table("job_sources") as batch:
        batch.add_column(sa.Column("branch", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("base_ref", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("base_commit_sha", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("pull_request_number", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("pull_request_url", sa.Text(), nullable=True))
        batch.add_column(sa.Column("fail_on", sa.JSON(), nullable=True))
    with op.batch_alter_table("test_results") as batch:
        batch.add_column(sa.Column("line", sa.Integer(), nullable=True))
    op.create_table(
        "base_comparisons",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("config_label", sa.String(length=200), nullable=False),
        sa.Column("test_id", sa.Text(), nullable=True),
        sa.Column("base_median_s", sa.Float(), nullable=False),
        sa.Column("head_median_s", sa.Float(), nullable=False),
        sa.Column("base_n", sa.Integer(), nullable=False),
        sa.Column("head_n", sa.Integer(), nullable=False),
        sa.Column("ratio", sa.Float(), nullable=True),
        sa.Column("ratio_low", sa.Float(), nullable=True),
        sa.Column("ratio_high", sa.Float(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_base_comparisons_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_base_comparisons")),
    )
    with op.batch_alter_table("base_comparisons") as batch:
        batch.create_index(batch.f("ix_base_comparisons_job_id"), ["job_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("base_comparisons") as batch:
        batch.drop_index(batch.f("ix_base_comparisons_job_id"))
    op.drop_table("base_comparisons")
    with op.batch_alter_table("test_results") as batch:
        batch.drop_column("line")
    with op.batch_alter_table("job_sources") as batch:
        batch.drop_column("fail_on")
        batch.drop_column("pull_request_url")
        batch.drop_column("pull_request_number")
        batch.drop_column("base_commit_sha")
        batch.drop_column("base_ref")
        batch.drop_column("branch")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("trigger")
