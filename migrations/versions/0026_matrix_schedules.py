"""matrix_schedules: how often a branch the project keeps history on gets a matrix job

Revision ID: 0026_matrix_schedules
Revises: 0025_job_kind
Create Date: 2026-11-29

`.lagtrace.yml` ``matrix_every_h`` says how often the default branch gets a matrix job,
whose runs are the history gates compare with. A push job on that branch stores it here
as it reads its config (one row per project and branch: the unique constraint keeps two
pushes prepared at once from storing two), and the periodic pass creates a matrix job on
the latest pushed commit when none was created within it (services/jobs/schedule.py).
A new table: no row of an existing one changes, so nothing is backfilled.
"""
from alembic import op
import sqlalchemy as sa


revision = '0026_matrix_schedules'
down_revision = '0025_job_kind'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'matrix_schedules',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('branch', sa.String(length=255), nullable=False),
        sa.Column('every_h', sa.Float(), nullable=True),
        sa.Column('job_id', sa.Integer(), nullable=True),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('attempted_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('error', sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ['project_id'],
            ['projects.id'],
            name=op.f('fk_matrix_schedules_project_id_projects'),
            ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['job_id'], ['jobs.id'], name=op.f('fk_matrix_schedules_job_id_jobs'), ondelete='SET NULL'
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_matrix_schedules')),
        sa.UniqueConstraint('project_id', 'branch', name='uq_matrix_schedules_project_id_branch'),
    )


def downgrade() -> None:
    op.drop_table('matrix_schedules')
