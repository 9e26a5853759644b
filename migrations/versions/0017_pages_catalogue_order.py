"""pages: the test catalogue's entries in the list's order; each problem's ratio

Revision ID: 0017_pages_catalogue_order
Revises: 0016_job_shards
Create Date: 2026-11-26

The catalogue lists tests most recently run first, then by name. It grouped and sorted
every entry on each view (10,000 entries, most of them one suite's newest job: about
10 ms of PostgreSQL's CPU a view); scanning this index backwards, a page reads the
newest entries, already in order, until it has its tests.

The inbox ordered every problem by its newest finding's ratio read from the finding's
metrics, JSON parsed per problem and view (4 ms of PostgreSQL's CPU at 700 problems);
the ratio is kept with the problem's sums, filled here from the newest findings.
"""
from alembic import op
import sqlalchemy as sa


revision = '0017_pages_catalogue_order'
down_revision = '0016_job_shards'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('finding_groups') as batch:
        batch.add_column(sa.Column('ratio', sa.Float(), server_default='1', nullable=False))
    # As services/diagnose/inbox.py rebuild_groups fills it (a migration does not import
    # the code it migrates for).
    findings = sa.table('findings', sa.column('id', sa.Integer()), sa.column('metrics', sa.JSON()))
    groups = sa.table('finding_groups', sa.column('latest_id', sa.Integer()), sa.column('ratio', sa.Float()))
    metric = sa.func.coalesce(findings.c.metrics['ratio'].as_float(), 1.0)
    newest = sa.select(sa.case((metric > 1.0, metric), else_=1.0)).where(findings.c.id == groups.c.latest_id)
    op.execute(groups.update().values(ratio=newest.scalar_subquery()))
    op.create_index(
        'ix_test_catalogue_newest',
        'test_catalogue',
        ['last_job_id', sa.text('test_id DESC'), sa.text('project_id DESC')],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index('ix_test_catalogue_newest', table_name='test_catalogue')
    with op.batch_alter_table('finding_groups') as batch:
        batch.drop_column('ratio')
