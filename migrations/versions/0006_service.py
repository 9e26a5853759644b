"""service: tokens, webhook deliveries, job sources, task ledger, triage history

Revision ID: 0006_service
Revises: 0005
Create Date: 2026-11-21

Everything the service adds is in new tables: no existing column changes.
"""
from alembic import op
import sqlalchemy as sa


revision = '0006_service'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('api_tokens',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('project_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], name=op.f('fk_api_tokens_project_id_projects'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_tokens')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_api_tokens_token_hash'))
    )
    op.create_index(op.f('ix_api_tokens_project_id'), 'api_tokens', ['project_id'], unique=False)
    op.create_table('job_sources',
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('repository_url', sa.Text(), nullable=True),
    sa.Column('ref', sa.String(length=255), nullable=True),
    sa.Column('commit_sha', sa.String(length=64), nullable=True),
    sa.Column('archive', sa.LargeBinary(), nullable=True),
    sa.Column('from_repository_config', sa.Boolean(), nullable=False),
    sa.Column('image', sa.String(length=255), nullable=True),
    sa.Column('github_repository', sa.String(length=255), nullable=True),
    sa.Column('github_head_sha', sa.String(length=64), nullable=True),
    sa.Column('github_check_run_id', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_sources_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', name=op.f('pk_job_sources'))
    )
    op.create_table('webhook_deliveries',
    sa.Column('delivery_id', sa.String(length=100), nullable=False),
    sa.Column('event', sa.String(length=64), nullable=False),
    sa.Column('action', sa.String(length=64), nullable=True),
    sa.Column('job_id', sa.Integer(), nullable=True),
    sa.Column('outcome', sa.Text(), nullable=False),
    sa.Column('received_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_webhook_deliveries_job_id_jobs'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('delivery_id', name=op.f('pk_webhook_deliveries'))
    )
    op.create_table('job_tasks',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('config_id', sa.Integer(), nullable=True),
    sa.Column('step', sa.String(length=32), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('state', sa.Enum('pending', 'running', 'done', 'failed', 'cancelled', name='taskstate', native_enum=False, length=32), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('worker', sa.String(length=200), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['config_id'], ['job_configs.id'], name=op.f('fk_job_tasks_config_id_job_configs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_tasks_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_tasks')),
    sa.UniqueConstraint('job_id', 'name', name='uq_job_tasks_job_id_name')
    )
    op.create_index(op.f('ix_job_tasks_job_id'), 'job_tasks', ['job_id'], unique=False)
    op.create_index(op.f('ix_job_tasks_state'), 'job_tasks', ['state'], unique=False)
    op.create_table('triage_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('finding_id', sa.Integer(), nullable=False),
    sa.Column('actor', sa.String(length=200), nullable=False),
    sa.Column('status', sa.Enum('new', 'acknowledged', 'muted', 'fixed', name='triagestatus', native_enum=False, length=32), nullable=False),
    sa.Column('assignee', sa.String(length=200), nullable=True),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['finding_id'], ['findings.id'], name=op.f('fk_triage_events_finding_id_findings'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_triage_events'))
    )
    op.create_index(op.f('ix_triage_events_finding_id'), 'triage_events', ['finding_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_triage_events_finding_id'), table_name='triage_events')
    op.drop_table('triage_events')
    op.drop_index(op.f('ix_job_tasks_state'), table_name='job_tasks')
    op.drop_index(op.f('ix_job_tasks_job_id'), table_name='job_tasks')
    op.drop_table('job_tasks')
    op.drop_table('webhook_deliveries')
    op.drop_table('job_sources')
    op.drop_index(op.f('ix_api_tokens_project_id'), table_name='api_tokens')
    op.drop_table('api_tokens')
