"""service_secrets: the dashboard's signing key, made once and shared by every serve process

Revision ID: 0023_service_secrets
Revises: 0022_workers
Create Date: 2026-11-27

Without LAGTRACE_SECRET_KEY each `serve` process made a random key of its own, so with
one process per CPU a sign-in cookie signed by one process was refused by the next (the
user was sent back to the sign-in form). The key is now made once and kept here.
"""
from alembic import op
import sqlalchemy as sa


revision = '0023_service_secrets'
down_revision = '0022_workers'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'service_secrets',
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('value', sa.Text(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('name', name=op.f('pk_service_secrets')),
    )


def downgrade() -> None:
    op.drop_table('service_secrets')
