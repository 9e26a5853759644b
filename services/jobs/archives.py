"""A project's uploaded archives, bounded: they live in the database (every worker node can
unpack them), so one token uploading again and again would fill its volume. The
archives a project holds are capped (``Settings.max_project_archive_bytes``); a new one
that would pass the cap drops the archives of the project's oldest finished jobs first
(a rerun of one of those then asks for the code again), and is refused, naming the
limit, where the jobs still waiting or running hold too much alone."""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from services.errors import BadInput
from services.jobs.lifecycle import FINISHED
from services.models import Job, JobSource, Project
from services.settings import Settings

LIMIT = "LAGTRACE_MAX_PROJECT_ARCHIVE_BYTES"
DROPPED = f"its uploaded archive was dropped to keep the project's archives under {LIMIT}: submit the code again"


def make_room(session: Session, settings: Settings, project: Project, size: int) -> list[int]:
    """Room for an archive of ``size`` bytes among the project's: the jobs whose archives
    were dropped for it, oldest first; BadInput (the field ``archive``) where none can be."""
    limit = settings.max_project_archive_bytes
    held = (
        select(JobSource.job_id, func.length(JobSource.archive).label("size"), Job.status)
        .join(Job, Job.id == JobSource.job_id)
        .where(Job.project_id == project.id, JobSource.archive.is_not(None))
        .order_by(JobSource.job_id)
    )
    rows = session.execute(held).all()
    total = sum(row.size or 0 for row in rows)
    if total + size <= limit:
        return []
    dropped = []
    for row in rows:
        if total + size <= limit:
            break
        if row.status in FINISHED:
            dropped.append(row.job_id)
            total -= row.size or 0
    if total + size > limit:
        raise BadInput(
            f"archive: {size} bytes, and the project's waiting and running jobs hold {total} bytes of archives: "
            f"more than the {limit} bytes a project may hold ({LIMIT}); wait for them to finish",
            field="archive",
        )
    session.execute(update(JobSource).where(JobSource.job_id.in_(dropped)).values(archive=None))
    return dropped
