"""Where large evidence files (cores, flame graphs, profiles) go: one interface, a directory
implementation for one machine, and an S3-compatible bucket when API and workers are
separate pods (LAGTRACE_ARTIFACTS_S3_BUCKET), so the probes never know which.

Everything is stored zstd-compressed and size-capped; the database keeps the parsed
evidence and an `ArtifactRef` (as a plain dict) per stored file.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Protocol

import zstandard

from services.settings import Settings

CHUNK = 1 << 20
SUFFIX = ".zst"


@dataclass(frozen=True)
class ArtifactRef:
    key: str  # how the store finds it again, e.g. "job-3/run-17/flamegraph.svg"
    name: str  # the file's own name, for downloads
    media_type: str
    size: int  # bytes before compression
    stored_size: int  # bytes on the store, compressed
    sha256: str  # of the uncompressed content

    def as_dict(self) -> dict:
        return asdict(self)


class ArtifactTooLarge(Exception):
    """The file is above the store's cap even compressed; the evidence records why it is missing."""


class ArtifactStore(Protocol):
    max_bytes: int

    def put(self, key: str, source: Path, media_type: str) -> ArtifactRef:
        """Compress and store the file at ``source`` under ``key``; raise ArtifactTooLarge."""

    def open(self, key: str) -> BinaryIO:
        """A reader of the stored file's original (decompressed) bytes."""

    def purge_expired(self, now: float | None = None) -> list[str]:
        """Delete artifacts older than the retention period; return their keys."""


class DirectoryArtifactStore:
    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int,
        retention_s: float,
        zstd_level: int = 3,
        job_quota_bytes: int | None = None,
    ):
        self.root = root
        self.max_bytes = max_bytes
        # All of one job's stored artifacts (keys "job-N/..."), compressed: a job that
        # makes endless big cores fills its quota, not the disk.
        self.job_quota_bytes = job_quota_bytes
        self.retention_s = retention_s
        self.zstd_level = zstd_level

    def _path(self, key: str) -> Path:
        _check_key(key)
        return self.root / (key + SUFFIX)

    def _room(self, key: str) -> tuple[int, str]:
        """How many compressed bytes ``key`` may take, and the setting that says so."""
        if self.job_quota_bytes is None or "/" not in key:
            return self.max_bytes, "LAGTRACE_ARTIFACT_MAX_BYTES"
        job_dir = self.root / key.split("/", 1)[0]
        used = sum(path.stat().st_size for path in job_dir.rglob("*" + SUFFIX)) if job_dir.is_dir() else 0
        left = self.job_quota_bytes - used
        if left < self.max_bytes:
            return max(left, 0), "LAGTRACE_ARTIFACT_JOB_QUOTA_BYTES, the job's quota left"
        return self.max_bytes, "LAGTRACE_ARTIFACT_MAX_BYTES"

    def put(self, key: str, source: Path, media_type: str) -> ArtifactRef:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        cap, cap_name = self._room(key)
        partial = target.with_name(target.name + ".partial")
        try:
            with open(partial, "wb") as raw:
                ref = _compress(key, source, media_type, raw, cap, cap_name, self.zstd_level)
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return ref

    def open(self, key: str) -> BinaryIO:
        return zstandard.ZstdDecompressor().stream_reader(open(self._path(key), "rb"), closefd=True)

    def read_bytes(self, key: str) -> bytes:
        with self.open(key) as reader:
            return reader.read()

    def purge_expired(self, now: float | None = None) -> list[str]:
        cutoff = (time.time() if now is None else now) - self.retention_s
        removed: list[str] = []
        if not self.root.is_dir():
            return removed
        for path in sorted(self.root.rglob("*" + SUFFIX)):
            if path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
                removed.append(str(path.relative_to(self.root))[: -len(SUFFIX)])
        return removed


def _compress(
    key: str, source: Path, media_type: str, raw: IO[bytes], cap: int, cap_name: str, level: int
) -> ArtifactRef:
    """Compress ``source`` into ``raw`` (an empty file opened for writing), within ``cap``."""
    digest = hashlib.sha256()
    size = 0
    # All cores: artifacts are stored between runs, never beside a measured one, and a
    # 300 MB core is the slowest step of the stall snapshot otherwise.
    compressor = zstandard.ZstdCompressor(level=level, threads=-1)
    # The source is a file the job's command wrote: never read through a link.
    reader_fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(reader_fd, "rb") as reader:
        # closefd=False: the size of what was written is read from `raw` after flush.
        with compressor.stream_writer(raw, closefd=False) as writer:
            while chunk := reader.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
                writer.write(chunk)
                # Checked as it grows, so an oversized core is abandoned early
                # instead of being compressed to the end first.
                if raw.tell() > cap:
                    raise ArtifactTooLarge(
                        f"{source.name} exceeds the artifact cap of {cap} bytes even compressed ({cap_name})"
                    )
            writer.flush(zstandard.FLUSH_FRAME)
        stored = raw.tell()
    if stored > cap:
        raise ArtifactTooLarge(
            f"{source.name} is {stored} bytes compressed, above the artifact cap of {cap} bytes ({cap_name})"
        )
    return ArtifactRef(
        key=key,
        name=Path(key).name,
        media_type=media_type,
        size=size,
        stored_size=stored,
        sha256=digest.hexdigest(),
    )


def _check_key(key: str) -> None:
    parts = Path(key).parts
    if not parts or Path(key).is_absolute() or ".." in parts:
        raise ValueError(f"artifact key {key!r} must be a relative path without '..'")


class S3ArtifactStore:
    """Artifacts as objects ``<prefix><key>.zst`` in an S3-compatible bucket (AWS S3, MinIO,
    Ceph RGW, GCS's XML API): workers upload, the API streams them back, whichever pod.

    A file is compressed to a temporary file on the worker first (the cap is checked as
    it grows), then uploaded in parts by boto3's transfer manager; nothing holds a whole
    artifact in memory. Retention is the object's LastModified, as the directory store's
    is the file's mtime (a bucket lifecycle rule may do the same job: both are harmless).
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        *,
        prefix: str = "",
        max_bytes: int,
        retention_s: float,
        zstd_level: int = 3,
        job_quota_bytes: int | None = None,
    ):
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.max_bytes = max_bytes
        self.retention_s = retention_s
        self.zstd_level = zstd_level
        self.job_quota_bytes = job_quota_bytes

    def _object(self, key: str) -> str:
        _check_key(key)
        return f"{self.prefix}{key}{SUFFIX}"

    def _objects(self, prefix: str):
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            yield from page.get("Contents", [])

    def _room(self, key: str) -> tuple[int, str]:
        if self.job_quota_bytes is None or "/" not in key:
            return self.max_bytes, "LAGTRACE_ARTIFACT_MAX_BYTES"
        job_prefix = f"{self.prefix}{key.split('/', 1)[0]}/"
        used = sum(item["Size"] for item in self._objects(job_prefix) if item["Key"].endswith(SUFFIX))
        left = self.job_quota_bytes - used
        if left < self.max_bytes:
            return max(left, 0), "LAGTRACE_ARTIFACT_JOB_QUOTA_BYTES, the job's quota left"
        return self.max_bytes, "LAGTRACE_ARTIFACT_MAX_BYTES"

    def put(self, key: str, source: Path, media_type: str) -> ArtifactRef:
        name = self._object(key)
        cap, cap_name = self._room(key)
        with tempfile.TemporaryFile(prefix="lagtrace-artifact-") as raw:
            ref = _compress(key, source, media_type, raw, cap, cap_name, self.zstd_level)
            raw.seek(0)
            self.client.upload_fileobj(
                raw,
                self.bucket,
                name,
                ExtraArgs={"ContentType": "application/zstd", "Metadata": {"media-type": media_type}},
            )
        return ref

    def open(self, key: str) -> BinaryIO:
        from botocore.exceptions import ClientError

        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._object(key))["Body"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise FileNotFoundError(key) from None
            raise
        # The response body is read as the client reads the download: chunk by chunk.
        return zstandard.ZstdDecompressor().stream_reader(body, closefd=True)

    def read_bytes(self, key: str) -> bytes:
        with self.open(key) as reader:
            return reader.read()

    def purge_expired(self, now: float | None = None) -> list[str]:
        cutoff = (time.time() if now is None else now) - self.retention_s
        expired = [
            item["Key"]
            for item in self._objects(self.prefix)
            if item["Key"].endswith(SUFFIX) and item["LastModified"].timestamp() < cutoff
        ]
        for start in range(0, len(expired), 1000):  # DeleteObjects takes at most 1000 keys
            batch = expired[start : start + 1000]
            self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": name} for name in batch], "Quiet": True}
            )
        return sorted(name[len(self.prefix) : -len(SUFFIX)] for name in expired)


def s3_client(settings: Settings) -> Any:
    """A boto3 S3 client for the settings' endpoint; without keys, boto3's own chain
    (environment, web identity / IRSA, instance profile) supplies the credentials."""
    key_id = settings.artifacts_s3_access_key_id
    secret = settings.artifacts_s3_secret_access_key
    return _s3_client(
        settings.artifacts_s3_endpoint_url,
        settings.artifacts_s3_region,
        key_id.get_secret_value() if key_id else None,
        secret.get_secret_value() if secret else None,
        settings.artifacts_s3_path_style,
    )


# One client per configuration and process (they are thread-safe; making one takes about
# 50 ms, too much for every download).
@functools.lru_cache(maxsize=8)
def _s3_client(endpoint: str | None, region: str | None, key_id: str | None, secret: str | None, path_style: bool):
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(
            # MinIO and most in-cluster servers want path-style URLs (no bucket DNS names).
            s3={"addressing_style": "path" if path_style else "auto"},
            retries={"max_attempts": 5, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
        ),
    )


def make_artifact_store(settings: Settings) -> ArtifactStore:
    if settings.artifacts_s3_bucket:
        return S3ArtifactStore(
            s3_client(settings),
            settings.artifacts_s3_bucket,
            prefix=settings.artifacts_s3_prefix,
            max_bytes=settings.artifact_max_bytes,
            retention_s=settings.artifact_retention_days * 86400,
            zstd_level=settings.artifact_zstd_level,
            job_quota_bytes=settings.artifact_job_quota_bytes,
        )
    return DirectoryArtifactStore(
        settings.artifact_dir,
        max_bytes=settings.artifact_max_bytes,
        retention_s=settings.artifact_retention_days * 86400,
        zstd_level=settings.artifact_zstd_level,
        job_quota_bytes=settings.artifact_job_quota_bytes,
    )
