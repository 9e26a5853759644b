"""Where large evidence files (cores, flame graphs, profiles) go: one interface, a directory
implementation by default, so an object store can be added without touching the probes.

Everything is stored zstd-compressed and size-capped; the database keeps the parsed
evidence and an `ArtifactRef` (as a plain dict) per stored file.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

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
        parts = Path(key).parts
        if not parts or Path(key).is_absolute() or ".." in parts:
            raise ValueError(f"artifact key {key!r} must be a relative path without '..'")
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
        digest = hashlib.sha256()
        size = 0
        # All cores: artifacts are stored between runs, never beside a measured one, and a
        # 300 MB core is the slowest step of the stall snapshot otherwise.
        compressor = zstandard.ZstdCompressor(level=self.zstd_level, threads=-1)
        try:
            # The source is a file the job's command wrote: never read through a link.
            reader_fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(reader_fd, "rb") as reader, open(partial, "wb") as raw:
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
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return ArtifactRef(
            key=key,
            name=Path(key).name,
            media_type=media_type,
            size=size,
            stored_size=stored,
            sha256=digest.hexdigest(),
        )

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


def make_artifact_store(settings: Settings) -> ArtifactStore:
    return DirectoryArtifactStore(
        settings.artifact_dir,
        max_bytes=settings.artifact_max_bytes,
        retention_s=settings.artifact_retention_days * 86400,
        zstd_level=settings.artifact_zstd_level,
        job_quota_bytes=settings.artifact_job_quota_bytes,
    )
