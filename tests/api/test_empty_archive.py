"""An upload that holds no code is refused when it is made, naming the field, never run."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import tarfile

import pytest

from services.models import Job


def _empty_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w"):
        pass  # what `tar -c` of nothing writes: the end marker's zero blocks
    return buffer.getvalue()


def _one_file_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        content = b"def test_x():\n    pass\n"
        member = tarfile.TarInfo("test_x.py")
        member.size = len(content)
        archive.addfile(member, io.BytesIO(content))
    return buffer.getvalue()


@pytest.mark.parametrize(
    "archive",
    [
        pytest.param(_empty_tar(), id="plain tar"),
        pytest.param(gzip.compress(_empty_tar()), id="tgz"),
        pytest.param(bz2.compress(_empty_tar()), id="tbz2"),
        pytest.param(lzma.compress(_empty_tar()), id="txz"),
        pytest.param(gzip.compress(b""), id="gzip of nothing"),
        pytest.param(b"", id="no bytes"),
    ],
)
def test_an_empty_archive_is_refused_at_upload(api, archive):
    response = api.post(
        "/api/v1/jobs",
        data={"job": json.dumps({"command": ["pytest"]}), "archive": (io.BytesIO(archive), "code.tar.gz")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 422, response.get_json()
    body = response.get_json()
    assert "the archive is empty" in body["error"], body
    assert [problem["field"] for problem in body["problems"]] == ["archive"], body
    assert api.count(Job) == 0


def test_an_archive_with_a_file_is_taken(api):
    response = api.post(
        "/api/v1/jobs",
        data={"job": json.dumps({"command": ["pytest"]}), "archive": (io.BytesIO(_one_file_tar()), "code.tar.gz")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.get_json()
