"""The S3 artifact store against a real S3-speaking server (moto_server, its own process)."""

from __future__ import annotations

import os
import time

import pytest

from services.measure.artifacts import ArtifactTooLarge, S3ArtifactStore, make_artifact_store
from services.settings import Settings
from tests.support import s3

s3_server = s3.s3_server  # the fixture


def store_on(server, bucket: str, **overrides) -> S3ArtifactStore:
    settings = Settings(database_url="sqlite://", **server.settings(bucket), **overrides)
    store = make_artifact_store(settings)
    assert isinstance(store, S3ArtifactStore)
    return store


def test_put_uploads_compressed_and_reads_back(s3_server, tmp_path):
    bucket = s3_server.new_bucket()
    store = store_on(s3_server, bucket, artifacts_s3_prefix="lagtrace/", artifact_max_bytes=1 << 20)
    source = tmp_path / "core.123"
    content = b"\0" * 4_000_000 + os.urandom(1000)
    source.write_bytes(content)
    ref = store.put("job-1/run-2/core.123", source, "application/x-core")
    assert ref.size == len(content) and ref.stored_size < len(content) / 100
    listed = s3_server.client().list_objects_v2(Bucket=bucket)["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("lagtrace/job-1/run-2/core.123.zst", ref.stored_size)]
    with store.open(ref.key) as reader:
        assert reader.read(1000) == b"\0" * 1000  # a stream: read in parts
        assert reader.read() == content[1000:]
    with pytest.raises(FileNotFoundError):
        store.open("job-1/run-2/no-such-file")
    with pytest.raises(ValueError):
        store.put("../escape", source, "text/plain")


def test_caps_and_the_job_quota_leave_nothing_in_the_bucket(s3_server, tmp_path):
    bucket = s3_server.new_bucket()
    store = store_on(s3_server, bucket, artifact_max_bytes=10_000, artifact_job_quota_bytes=12_000)
    noise = tmp_path / "random.bin"
    noise.write_bytes(os.urandom(3 << 20))  # incompressible
    with pytest.raises(ArtifactTooLarge, match="10000 bytes"):
        store.put("job-1/random.bin", noise, "application/octet-stream")
    assert "Contents" not in s3_server.client().list_objects_v2(Bucket=bucket)
    first = tmp_path / "first.bin"
    first.write_bytes(os.urandom(8_000))
    store.put("job-1/first.bin", first, "application/octet-stream")
    # 8 kB of the job's 12 kB are used: the same again does not fit, in another job it does.
    with pytest.raises(ArtifactTooLarge, match="quota"):
        store.put("job-1/second.bin", first, "application/octet-stream")
    store.put("job-2/first.bin", first, "application/octet-stream")


def test_retention_purges_old_objects_only(s3_server, tmp_path):
    bucket = s3_server.new_bucket()
    store = store_on(s3_server, bucket, artifacts_s3_prefix="p/", artifact_retention_days=1)
    source = tmp_path / "a.txt"
    source.write_text("x")
    store.put("job-1/a.txt", source, "text/plain")
    assert store.purge_expired() == []
    # A day and a bit later (the server stamps LastModified; the clock is moved instead).
    assert store.purge_expired(now=time.time() + 90_000) == ["job-1/a.txt"]
    assert "Contents" not in s3_server.client().list_objects_v2(Bucket=bucket)


def test_without_a_bucket_the_directory_store_stays(tmp_path):
    store = make_artifact_store(Settings(database_url="sqlite://", artifact_dir=tmp_path))
    assert not isinstance(store, S3ArtifactStore)
