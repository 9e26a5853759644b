"""An uploaded archive lives in the database beside its job, and is read only where it is
unpacked (or copied into a rerun): a list of jobs, up to 200 a request, never reads it.
Statements as the database received them, from SQLAlchemy's cursor events."""

from __future__ import annotations

import io
import json
import os
import tarfile

from sqlalchemy import event

from services.jobs import sources
from services.models import JobSource


def _archive(size: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in (("test_x.py", b"def test_x():\n    pass\n"), ("blob.bin", os.urandom(size))):
            member = tarfile.TarInfo(name)
            member.size = len(content)
            archive.addfile(member, io.BytesIO(content))
    return buffer.getvalue()


def _statements(api, call) -> list[str]:
    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement)

    event.listen(api.engine, "before_cursor_execute", record)
    try:
        call()
    finally:
        event.remove(api.engine, "before_cursor_execute", record)
    return seen


def test_a_list_of_jobs_and_a_job_never_read_their_archives(sqlite_api, tmp_path):
    api = sqlite_api
    ids = []
    for _ in range(3):
        response = api.post(
            "/api/v1/jobs",
            data={"job": json.dumps({"command": ["pytest"]}), "archive": (io.BytesIO(_archive(64 * 1024)), "c.tgz")},
            content_type="multipart/form-data",
        )
        assert response.status_code == 201, response.get_json()
        ids.append(response.get_json()["id"])

    listed = _statements(api, lambda: api.get("/api/v1/jobs?limit=200"))
    assert any("job_sources" in s for s in listed), listed  # the sources are read, for their refs
    assert not [s for s in listed if "archive" in s], [s for s in listed if "archive" in s]
    one = _statements(api, lambda: api.get(f"/api/v1/jobs/{ids[0]}"))
    assert not [s for s in one if "archive" in s]

    # Where the code is unpacked, it is read: the worker's checkout of the job.
    made = []
    with api.session_factory() as session:
        source = session.get(JobSource, ids[0])
        unpacked = _statements(api, lambda: made.append(sources.checkout(source, api.settings, "archive-read")))
    [(directory, _)] = made
    try:
        assert [s for s in unpacked if "archive" in s], unpacked
        assert (directory / "test_x.py").read_text().startswith("def test_x")
    finally:
        sources.remove(directory)
