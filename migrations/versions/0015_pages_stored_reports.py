"""pages: each finished job's report stored once, for its page and the API; findings
summed per problem for the inbox; a test's results by run

Revision ID: 0015_pages_reports
Revises: 0012_session_epoch
Create Date: 2026-11-25

New tables only: jobs finished before it have no stored report, and their pages build
it as before (one at a time, as they are opened); the problems' summary is filled here
from the findings stored so far.
"""
from alembic import op
import sqlalchemy as sa


revision = '0015_pages_reports'
down_revision = '0014_measured_on'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'job_reports',
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('report', sa.JSON(), nullable=False),
        sa.Column('page', sa.JSON(), nullable=False),
        sa.Column('finding_states', sa.JSON(), nullable=False),
        sa.Column('built_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['job_id'], ['jobs.id'], name=op.f('fk_job_reports_job_id_jobs'), ondelete='CASCADE'
        ),
        sa.PrimaryKeyConstraint('job_id', name=op.f('pk_job_reports')),
    )


    op.create_table(
        'finding_groups',
        sa.Column('fingerprint', sa.String(length=64), nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('kind', sa.String(length=32), nullable=False),
        sa.Column('test_id', sa.Text(), nullable=True),
        sa.Column('latest_id', sa.Integer(), nullable=False),
        sa.Column('recurrence', sa.Integer(), nullable=False),
        sa.Column('first_seen', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_seen', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['project_id'], ['projects.id'], name=op.f('fk_finding_groups_project_id_projects'), ondelete='CASCADE'
        ),
        sa.PrimaryKeyConstraint('fingerprint', name=op.f('pk_finding_groups')),
    )
    op.create_index(op.f('ix_finding_groups_project_id'), 'finding_groups', ['project_id'], unique=False)
    op.execute(REBUILD_GROUPS)
    # A test's newest results first (the catalogue's test entry), without reading all of them.
    op.create_index('ix_test_results_test_id_run_id', 'test_results', ['test_id', 'run_id'], unique=False)


# The same statement as services/diagnose/inbox.py REBUILD_GROUPS (a migration does not
# import the code it migrates for).
REBUILD_GROUPS = """
INSERT INTO finding_groups (fingerprint, project_id, kind, test_id, latest_id, recurrence, first_seen, last_seen)
SELECT g.fingerprint, j.project_id, f.kind, f.test_id, g.latest_id, g.recurrence, g.first_seen, g.last_seen
FROM (
    SELECT fingerprint, max(id) AS latest_id, count(DISTINCT job_id) AS recurrence,
           min(created_at) AS first_seen, max(created_at) AS last_seen
    FROM findings GROUP BY fingerprint
) g
JOIN findings f ON f.id = g.latest_id
JOIN jobs j ON j.id = f.job_id
"""


def downgrade() -> None:
    op.drop_index('ix_test_results_test_id_run_id', table_name='test_results')
    op.drop_index(op.f('ix_finding_groups_project_id'), table_name='finding_groups')
    op.drop_table('finding_groups')
    op.drop_table('job_reports')
