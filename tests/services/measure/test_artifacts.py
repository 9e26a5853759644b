import os
import time

import pytest

from services.measure.artifacts import ArtifactTooLarge, DirectoryArtifactStore, make_artifact_store
from services.settings import Settings


def test_put_compresses_and_reads_back(tmp_path):
    store = DirectoryArtifactStore(tmp_path / "store", max_bytes=1 << 20, retention_s=3600)
    source = tmp_path / "core.123"
    content = b"\0" * 4_000_000 + os.urandom(1000)
    source.write_bytes(content)
    ref = store.put("job-1/run-2/core.123", source, "application/x-core")
    assert ref.size == len(content)
    assert ref.stored_size < len(content) / 100
    assert (tmp_path / "store" / "job-1" / "run-2" / "core.123.zst").stat().st_size == ref.stored_size
    assert store.read_bytes(ref.key) == content
    assert ref.as_dict()["media_type"] == "application/x-core"


def test_above_the_cap_nothing_is_left_behind(tmp_path):
    store = DirectoryArtifactStore(tmp_path / "store", max_bytes=10_000, retention_s=3600)
    source = tmp_path / "random.bin"
    source.write_bytes(os.urandom(3 << 20))  # incompressible
    with pytest.raises(ArtifactTooLarge, match="10000 bytes"):
        store.put("job-1/random.bin", source, "application/octet-stream")
    assert list((tmp_path / "store").rglob("*")) == [tmp_path / "store" / "job-1"]


def test_retention_purges_old_artifacts_only(tmp_path):
    store = DirectoryArtifactStore(tmp_path, max_bytes=1 << 20, retention_s=100)
    source = tmp_path / "a.txt"
    source.write_text("x")
    store.put("old/a.txt", source, "text/plain")
    store.put("new/a.txt", source, "text/plain")
    old = tmp_path / "old" / "a.txt.zst"
    os.utime(old, (time.time() - 1000, time.time() - 1000))
    assert store.purge_expired() == ["old/a.txt"]
    assert not old.exists() and (tmp_path / "new" / "a.txt.zst").exists()


def test_keys_cannot_escape_the_store(tmp_path):
    store = DirectoryArtifactStore(tmp_path / "store", max_bytes=1 << 20, retention_s=100)
    source = tmp_path / "a.txt"
    source.write_text("x")
    for key in ("../escape", "/abs/path"):
        with pytest.raises(ValueError):
            store.put(key, source, "text/plain")


def test_settings_build_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("LAGTRACE_ARTIFACT_DIR", str(tmp_path))
    monkeypatch.setenv("LAGTRACE_ARTIFACT_MAX_BYTES", "5000")
    monkeypatch.setenv("LAGTRACE_ARTIFACT_RETENTION_DAYS", "2")
    store = make_artifact_store(Settings())
    assert store.root == tmp_path and store.max_bytes == 5000 and store.retention_s == 2 * 86400
