"""An uploaded archive lives in the database beside its job, and is read only where it is
unpacked (or copied into a rerun): a list of jobs, up to 200 a request, never reads it.
Statements as the database received them, from SQLAlchemy's cursor events."""

from __future__ import annotations

import io
import json
import os
import tarfile

import pytest
from sqlalchemy import event

from services.jobs import sources
from services.models import Job, JobSource, JobStatus
from tests.api.conftest import build_api


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


@pytest.mark.parametrize("database_url", ["sqlite", "postgres"], indirect=True)
def test_a_projects_archives_are_capped_the_oldest_finished_dropped_first(database_url, tmp_path):
    # Sizes as each database counts a blob's bytes (length() of a BLOB, of a bytea).
    api = build_api(database_url, tmp_path, "http://127.0.0.1:9", run_jobs=False)
    api.settings.max_project_archive_bytes = 200_000
    try:

        def upload():
            return api.post(
                "/api/v1/jobs",
                data={"job": json.dumps({"command": ["pytest"]}), "archive": (io.BytesIO(_archive(70_000)), "c.tgz")},
                content_type="multipart/form-data",
            )

        first, second = (upload().get_json()["id"] for _ in range(2))
        # Both still queued: a third would pass the cap, and nothing finished can make room.
        refused = upload()
        assert refused.status_code == 422, refused.get_json()
        assert "LAGTRACE_MAX_PROJECT_ARCHIVE_BYTES" in refused.get_json()["error"]
        assert [p["field"] for p in refused.get_json()["problems"]] == ["archive"]

        with api.session_factory() as session:
            session.get(Job, first).status = JobStatus.done
            session.commit()
        taken = upload()
        assert taken.status_code == 201, taken.get_json()
        with api.session_factory() as session:
            assert session.get(JobSource, first).archive is None  # the oldest finished one made room
            assert session.get(JobSource, second).archive is not None
        # A rerun of the job whose code was dropped asks for the code again, saying why.
        rerun = api.post(f"/api/v1/jobs/{first}/rerun", json={"configs": ["cpuset=0"]})
        assert rerun.status_code == 409, rerun.get_json()
        assert "submit the code again" in rerun.get_json()["error"]
    finally:
        api.engine.dispose()
