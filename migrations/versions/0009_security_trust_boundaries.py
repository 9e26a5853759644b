"""security: registered repositories, fork policy, image allowlist, token expiry, replays

Revision ID: 0009_security
Revises: 0007_web
Create Date: 2026-11-22

New nullable (or defaulted) columns only: existing rows keep working.
"""
from alembic import op
import sqlalchemy as sa


revision = '0009_security'
down_revision = '0008_stats_screen_seed'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('projects') as batch:
        batch.add_column(sa.Column('github_repository', sa.String(length=255), nullable=True))
        batch.add_column(sa.Column('repository_url', sa.Text(), nullable=True))
        batch.add_column(sa.Column('webhook_secret', sa.String(length=255), nullable=True))
        batch.add_column(
            sa.Column('allow_fork_pull_requests', sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column('allowed_images', sa.JSON(), nullable=False, server_default='[]'))
        batch.create_unique_constraint(batch.f('uq_projects_github_repository'), ['github_repository'])
    with op.batch_alter_table('job_sources') as batch:
        batch.add_column(sa.Column('config_commit_sha', sa.String(length=64), nullable=True))
    with op.batch_alter_table('api_tokens') as batch:
        batch.add_column(sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table('webhook_deliveries') as batch:
        batch.add_column(sa.Column('body_sha256', sa.String(length=64), nullable=True))
        batch.create_unique_constraint(batch.f('uq_webhook_deliveries_body_sha256'), ['body_sha256'])


def downgrade() -> None:
    with op.batch_alter_table('webhook_deliveries') as batch:
        batch.drop_constraint(batch.f('uq_webhook_deliveries_body_sha256'), type_='unique')
        batch.drop_column('body_sha256')
    with op.batch_alter_table('api_tokens') as batch:
        batch.drop_column('expires_at')
    with op.batch_alter_table('job_sources') as batch:
        batch.drop_column('config_commit_sha')
    with op.batch_alter_table('projects') as batch:
        batch.drop_constraint(batch.f('uq_projects_github_repository'), type_='unique')
        batch.drop_column('allowed_images')
        batch.drop_column('allow_fork_pull_requests')
        batch.drop_column('webhook_secret')
        batch.drop_column('repository_url')
        batch.drop_column('github_repository')
