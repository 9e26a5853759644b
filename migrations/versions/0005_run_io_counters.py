"""run io counters

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21 11:37:13.544263
"""
from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('read_syscalls', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('read_bytes', sa.BigInteger(), nullable=True))



def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('read_bytes')
        batch_op.drop_column('read_syscalls')

