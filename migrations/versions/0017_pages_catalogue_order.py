"""pages: the test catalogue's entries in the list's order

Revision ID: 0017_pages_catalogue_order
Revises: 0016_job_shards
Create Date: 2026-11-26

The catalogue lists tests most recently run first, then by name. It grouped and sorted
every entry on each view (10,000 entries, most of them one suite's newest job: about
10 ms of PostgreSQL's CPU a view); scanning this index backwards, a page reads the
newest entries, already in order, until it has its tests.
"""
from alembic import op
import sqlalchemy as sa


revision = '0017_pages_catalogue_order'
down_revision = '0016_job_shards'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        'ix_test_catalogue_newest',
        'test_catalogue',
        ['last_job_id', sa.text('test_id DESC'), sa.text('project_id DESC')],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index('ix_test_catalogue_newest', table_name='test_catalogue')
