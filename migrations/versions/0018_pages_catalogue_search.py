"""pages: the catalogue's search through a trigram index, where the server has pg_trgm

Revision ID: 0018_pages_catalogue_search
Revises: 0017_pages_catalogue_order
Create Date: 2026-11-27

The catalogue's search matches part of a node id (`ILIKE '%part%'`), which no B-tree
serves: PostgreSQL read the whole project's entries newest first and filtered them
(10,000 entries, most of them one suite's newest job: 8 ms of its CPU a search). A GIN
index of trigrams (the pg_trgm extension, in PostgreSQL's contrib: Debian's postgresql
package and the official image ship it) finds the few matching entries in 0.2 ms.

Where the extension cannot be had (not installed, or a role that may not create it:
a trusted extension since PostgreSQL 13, it needs CREATE on the database), the
migration says so and leaves the search as it was: slower, never wrong. SQLite (the
embedded database) has no such index.
"""

import logging

from alembic import op
import sqlalchemy as sa


revision = "0018_pages_catalogue_search"
down_revision = "0017_pages_catalogue_order"
branch_labels = None
depends_on = None

INDEX = "ix_test_catalogue_test_trgm"
CREATE = f"CREATE INDEX {INDEX} ON test_catalogue USING gin (test_id gin_trgm_ops)"
log = logging.getLogger("alembic.runtime.migration")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    installed = bind.scalar(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'"))
    if not installed:
        available = bind.scalar(sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'"))
        allowed = bind.scalar(sa.text("SELECT has_database_privilege(current_database(), 'CREATE')"))
        if not (available and allowed):
            log.warning(
                "pg_trgm is %s: the test catalogue's search reads every entry of a project; "
                "to index it later, as a role that may: CREATE EXTENSION pg_trgm; %s",
                "not installed on this server" if not available else "not creatable by this role",
                CREATE,
            )
            return
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.execute(CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # The extension stays: other databases' objects or an operator's may use it.
    op.execute(f"DROP INDEX IF EXISTS {INDEX}")
