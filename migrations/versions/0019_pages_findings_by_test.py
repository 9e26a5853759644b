"""pages: a test's findings through an index on findings.test_id

Revision ID: 0019_pages_findings_by_test
Revises: 0018_pages_catalogue_search
Create Date: 2026-11-27

A test's page in the catalogue reads the test's findings, and the change-point search
the steps already reported for a branch's tests: both filtered every finding by its test
(20,000 findings in the benchmark: 7 ms of PostgreSQL's CPU a test's page, growing with
every job).
"""

from alembic import op


revision = "0019_pages_findings_by_test"
down_revision = "0018_pages_catalogue_search"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_findings_test_id", "findings", ["test_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_findings_test_id", table_name="findings")
