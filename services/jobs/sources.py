"""The code a service job measures: a git clone at a ref, or an uploaded tarball.

Every task that runs the command (on whatever node) makes its own copy in a fresh
directory and removes it afterwards, so nodes share nothing but the database.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from pydantic import ValidationError

from services.errors import BadInput, LagtraceError
from services.jobs.spec import REPOSITORY_CONFIG_FILE, RepositoryConfig
from services.models import JobSource
from services.settings import Settings

REMOTE_SCHEMES = ("https", "http", "ssh", "git")
# user@host:path, the scp-like form git accepts for ssh.
SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:[^/].*")
SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
REF = re.compile(r"^[\w./-]{1,255}$")


class SourceError(LagtraceError):
    """The code could not be fetched: the job fails with this message."""


def check_repository_url(url: str, settings: Settings) -> str:
    """Accept remote git URLs; local ones only where the operator allowed them."""
    if SCP_LIKE.match(url):
        return url
    scheme = urlsplit(url).scheme
    if scheme in REMOTE_SCHEMES:
        return url
    if scheme == "file" or (not scheme and url.startswith("/")):
        if settings.allow_file_repositories:
            return url
        raise BadInput(
            f"repository.url {url!r}: local repositories are off on this server (LAGTRACE_ALLOW_FILE_REPOSITORIES)"
        )
    raise BadInput(f"repository.url {url!r}: not a git URL (https://, ssh://, git://, user@host:path)")


def check_ref(ref: str) -> str:
    if not REF.match(ref) or ".." in ref or ref.startswith("-"):
        raise BadInput(f"repository.ref {ref!r}: not a branch, tag or commit name")
    return ref


def check_archive(data: bytes, settings: Settings) -> bytes:
    """A gzip/bz2/xz or plain tarball below the size cap, with only safe members."""
    if len(data) > settings.max_archive_bytes:
        raise BadInput(f"archive: {len(data)} bytes, more than the {settings.max_archive_bytes} allowed")
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            for member in archive.getmembers():
                tarfile.data_filter(member, "/nonexistent")
    except tarfile.FilterError as exc:
        raise BadInput(f"archive: unsafe member: {exc}") from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BadInput(f"archive: not a readable tar archive ({exc})") from None
    return data


def checkout(source: JobSource, settings: Settings, name: str) -> tuple[Path, str | None]:
    """Materialise the job's code in a new directory ``name`` below the work dir.

    Returns the directory and, for git, the commit it holds.
    """
    directory = settings.work_dir / "jobs" / str(source.job_id) / name
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    if source.kind == "archive":
        with tarfile.open(fileobj=io.BytesIO(source.archive or b""), mode="r:*") as archive:
            archive.extractall(directory, filter="data")
        return directory, None
    return directory, _clone(source, settings, directory)


def remove(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def _git(settings: Settings, *args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    prefix = ["git", "-c", "advice.detachedHead=false"]
    if settings.allow_file_repositories:
        prefix += ["-c", "protocol.file.allow=always"]
    try:
        done = subprocess.run(
            [*prefix, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=settings.clone_timeout_s
        )
    except subprocess.TimeoutExpired:
        raise SourceError(f"git {args[0]} took more than {settings.clone_timeout_s:g} s") from None
    if done.returncode != 0:
        raise SourceError(f"git {args[0]} failed: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


def _clone(source: JobSource, settings: Settings, directory: Path) -> str:
    # The resolved commit wins over the ref: every task of a job, and its reruns,
    # measure the same code even if the branch moved meanwhile.
    want = source.commit_sha or source.ref or "HEAD"
    _git(settings, "init", "--quiet", cwd=directory)
    _git(settings, "remote", "add", "origin", source.repository_url or "", cwd=directory)
    try:
        _git(settings, "fetch", "--quiet", "--depth=1", "origin", want, cwd=directory)
    except SourceError:
        if not SHA.match(want):
            raise
        # Servers that refuse to serve a bare commit: fetch everything, then pick it.
        _git(settings, "fetch", "--quiet", "origin", cwd=directory)
        _git(settings, "checkout", "--quiet", want, cwd=directory)
    else:
        _git(settings, "checkout", "--quiet", "FETCH_HEAD", cwd=directory)
    return _git(settings, "rev-parse", "HEAD", cwd=directory)


def read_repository_config(directory: Path) -> RepositoryConfig:
    """Parse `.lagtrace.yml`; BadInput names the field that is wrong."""
    path = directory / REPOSITORY_CONFIG_FILE
    if not path.is_file():
        raise BadInput(f"the repository has no {REPOSITORY_CONFIG_FILE} (it names the command to screen)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise BadInput(f"{REPOSITORY_CONFIG_FILE} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise BadInput(f"{REPOSITORY_CONFIG_FILE} must be a mapping with at least `command`")
    try:
        return RepositoryConfig.model_validate(data)
    except ValidationError as exc:
        raise BadInput(f"{REPOSITORY_CONFIG_FILE}: {describe_validation_error(exc)}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """pydantic's errors as one line per field: `configs.0: ...`."""
    return "; ".join(f"{field_path(error['loc'])}: {error['msg']}" for error in exc.errors())


def validation_problems(exc: ValidationError, prefix: str = "") -> list[dict[str, str]]:
    """pydantic's errors as {field, message} pairs, as the API's error body and the pages show them."""
    return [{"field": prefix + field_path(e["loc"]), "message": e["msg"]} for e in exc.errors()]


def field_path(loc: tuple) -> str:
    return ".".join(str(part) for part in loc) or "(body)"
