"""finding regressions

Revision ID: 0003
Revises: 0001
Create Date: 2026-11-21 11:22:57.960391
"""
from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing findings were never regressions; the server default fills them in.
    with op.batch_alter_table('findings', schema=None) as batch_op:
        batch_op.add_column(sa.Column('regression', sa.Boolean(), nullable=False, server_default=sa.false()))



def downgrade() -> None:
    with op.batch_alter_table('findings', schema=None) as batch_op:
        batch_op.drop_column('regression')

