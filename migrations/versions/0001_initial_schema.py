"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-21 11:16:29.248555
"""
from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('projects',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_projects')),
    sa.UniqueConstraint('name', name=op.f('uq_projects_name'))
    )
    op.create_table('jobs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('project_id', sa.Integer(), nullable=False),
    sa.Column('parent_id', sa.Integer(), nullable=True),
    sa.Column('status', sa.Enum('queued', 'running', 'done', 'failed', 'cancelled', name='jobstatus', native_enum=False, length=32), nullable=False),
    sa.Column('source', sa.String(length=32), nullable=False),
    sa.Column('command', sa.JSON(), nullable=False),
    sa.Column('executor', sa.String(length=32), nullable=False),
    sa.Column('workdir', sa.Text(), nullable=True),
    sa.Column('repeat', sa.Integer(), nullable=False),
    sa.Column('timeout_s', sa.Float(), nullable=True),
    sa.Column('notes', sa.JSON(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['parent_id'], ['jobs.id'], name=op.f('fk_jobs_parent_id_jobs'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['project_id'], ['projects.id'], name=op.f('fk_jobs_project_id_projects'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs'))
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_jobs_project_id'), ['project_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_status'), ['status'], unique=False)

    op.create_table('findings',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('severity', sa.String(length=16), nullable=False),
    sa.Column('title', sa.Text(), nullable=False),
    sa.Column('detail', sa.Text(), nullable=False),
    sa.Column('config_label', sa.String(length=200), nullable=True),
    sa.Column('test_id', sa.Text(), nullable=True),
    sa.Column('metrics', sa.JSON(), nullable=False),
    sa.Column('evidence_ids', sa.JSON(), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('status', sa.Enum('new', 'acknowledged', 'muted', 'fixed', name='triagestatus', native_enum=False, length=32), nullable=False),
    sa.Column('assignee', sa.String(length=200), nullable=True),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_findings_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_findings'))
    )
    with op.batch_alter_table('findings', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_findings_fingerprint'), ['fingerprint'], unique=False)
        batch_op.create_index(batch_op.f('ix_findings_job_id'), ['job_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_findings_kind'), ['kind'], unique=False)

    op.create_table('job_configs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('label', sa.String(length=200), nullable=False),
    sa.Column('cpus', sa.Float(), nullable=True),
    sa.Column('cpuset', sa.String(length=200), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_configs_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_configs')),
    sa.UniqueConstraint('job_id', 'label', name='uq_job_configs_job_id_label')
    )
    with op.batch_alter_table('job_configs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_job_configs_job_id'), ['job_id'], unique=False)

    op.create_table('evidence',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('config_id', sa.Integer(), nullable=True),
    sa.Column('test_id', sa.Text(), nullable=True),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('content', sa.JSON(), nullable=False),
    sa.Column('text', sa.Text(), nullable=True),
    sa.Column('artifacts', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['config_id'], ['job_configs.id'], name=op.f('fk_evidence_config_id_job_configs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_evidence_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_evidence'))
    )
    with op.batch_alter_table('evidence', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_evidence_job_id'), ['job_id'], unique=False)

    op.create_table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('config_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.Enum('timing', 'evidence', name='runkind', native_enum=False, length=32), nullable=False),
    sa.Column('repetition', sa.Integer(), nullable=False),
    sa.Column('wall_s', sa.Float(), nullable=False),
    sa.Column('user_s', sa.Float(), nullable=False),
    sa.Column('sys_s', sa.Float(), nullable=False),
    sa.Column('max_rss_kb', sa.Integer(), nullable=False),
    sa.Column('voluntary_ctx_switches', sa.Integer(), nullable=False),
    sa.Column('involuntary_ctx_switches', sa.Integer(), nullable=False),
    sa.Column('exit_code', sa.Integer(), nullable=False),
    sa.Column('timed_out', sa.Boolean(), nullable=False),
    sa.Column('nr_periods', sa.Integer(), nullable=True),
    sa.Column('nr_throttled', sa.Integer(), nullable=True),
    sa.Column('throttled_s', sa.Float(), nullable=True),
    sa.Column('foreign_cpus', sa.Float(), nullable=False),
    sa.Column('output_tail', sa.Text(), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['config_id'], ['job_configs.id'], name=op.f('fk_runs_config_id_job_configs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs'))
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_runs_config_id'), ['config_id'], unique=False)

    op.create_table('test_results',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('test_id', sa.Text(), nullable=False),
    sa.Column('duration_s', sa.Float(), nullable=False),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_test_results_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_test_results'))
    )
    with op.batch_alter_table('test_results', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_test_results_run_id'), ['run_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('test_results', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_test_results_run_id'))

    op.drop_table('test_results')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_config_id'))

    op.drop_table('runs')
    with op.batch_alter_table('evidence', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_evidence_job_id'))

    op.drop_table('evidence')
    with op.batch_alter_table('job_configs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_configs_job_id'))

    op.drop_table('job_configs')
    with op.batch_alter_table('findings', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_findings_kind'))
        batch_op.drop_index(batch_op.f('ix_findings_job_id'))
        batch_op.drop_index(batch_op.f('ix_findings_fingerprint'))

    op.drop_table('findings')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_status'))
        batch_op.drop_index(batch_op.f('ix_jobs_project_id'))

    op.drop_table('jobs')
    op.drop_table('projects')
