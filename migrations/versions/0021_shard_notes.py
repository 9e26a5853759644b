"""jobs: each shard keeps its own notes, budget record and node, folded into the job's at the end

Revision ID: 0021_shard_notes
Revises: 0020_pages_test_points
Create Date: 2026-11-27

Two shards screened at once on two workers both wrote the job's notes and budget record
(a JSON column each, read, appended to, written whole), so the later commit dropped what
the other shard had written meanwhile: a futility note, a test the budget left out. Each
shard now writes its own row's columns; the last shard to finish folds them into the job.
The node and locks each shard's screen held (``measured_on``) likewise: the job kept one
shard's, whichever committed last, though two nodes measured.
"""
from alembic import op
import sqlalchemy as sa


revision = '0021_shard_notes'
down_revision = '0020_pages_test_points'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job_shards') as batch:
        batch.add_column(sa.Column('notes', sa.JSON(), nullable=False, server_default='[]'))
        batch.add_column(sa.Column('budget', sa.JSON(), nullable=True))
        batch.add_column(sa.Column('measured_on', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job_shards') as batch:
        batch.drop_column('measured_on')
        batch.drop_column('budget')
        batch.drop_column('notes')
