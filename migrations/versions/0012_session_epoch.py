"""accounts: a per-user session epoch, so that signing out ends every copy of the cookie

Revision ID: 0012_session_epoch
Revises: 0011_pages
Create Date: 2026-11-25

One defaulted column: existing users start at 0. Sessions signed before this release
carry no epoch and are asked to sign in again.
"""
from alembic import op
import sqlalchemy as sa


revision = '0012_session_epoch'
down_revision = '0011_pages'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('users') as batch:
        batch.add_column(sa.Column('session_epoch', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('users') as batch:
        batch.drop_column('session_epoch')
