"""The code a service job measures: a git clone at a ref, or an uploaded tarball.

Every task that runs the command (on whatever node) makes its own copy in a fresh
directory and removes it afterwards, so nodes share nothing but the database.
"""

from __future__ import annotations

import contextlib
import io
import lzma
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import yaml
from pydantic import ValidationError

from services.errors import BadInput, LagtraceError
from services.jobs.spec import REPOSITORY_CONFIG_FILE, RepositoryConfig
from services.models import JobSource
from services.settings import Settings

# https only: ssh would use the worker's keys, git:// and http:// are unauthenticated
# and let anyone on the path change the code. Local paths only where the operator says so.
REMOTE_SCHEMES = ("https",)
SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
REF = re.compile(r"^[\w./-]{1,255}$")
MAX_CONFIG_BYTES = 64 * 1024
COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")
# git's environment, built from scratch: no HOME (no ~/.gitconfig, ~/.git-credentials,
# ~/.ssh), no system config, no askpass, no credential helper.
GIT_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "/bin/false",
    "SSH_ASKPASS": "/bin/false",
    "GIT_SSH_COMMAND": "/bin/false",
    "GIT_PROTOCOL_FROM_USER": "0",
}


class SourceError(LagtraceError):
    """The code could not be fetched: the job fails with this message."""


def check_repository_url(url: str, settings: Settings) -> str:
    """Accept https:// git URLs; local ones only where the operator allowed them."""
    if url.startswith("-") or any(ord(char) < 32 for char in url):
        raise BadInput(f"repository.url {url!r}: not a git URL")
    parts = urlsplit(url)
    if parts.scheme in REMOTE_SCHEMES:
        if not parts.hostname:
            raise BadInput(f"repository.url {url!r}: no host")
        if parts.username or parts.password:
            raise BadInput(f"repository.url: credentials in the URL are not accepted ({parts.hostname})")
        return url
    if parts.scheme == "file" or (not parts.scheme and url.startswith("/")):
        if settings.allow_file_repositories:
            return url
        raise BadInput(
            f"repository.url {url!r}: local repositories are off on this server (LAGTRACE_ALLOW_FILE_REPOSITORIES)"
        )
    raise BadInput(f"repository.url {url!r}: only https:// git URLs are accepted")


def check_ref(ref: str) -> str:
    if not REF.match(ref) or ".." in ref or ref.startswith("-"):
        raise BadInput(f"repository.ref {ref!r}: not a branch, tag or commit name")
    return ref


def check_archive(data: bytes, settings: Settings) -> bytes:
    """Only the size, in the request: unpacking (and refusing bombs) is the worker's."""
    if len(data) > settings.max_archive_bytes:
        raise BadInput(f"archive: {len(data)} bytes, more than the {settings.max_archive_bytes} allowed")
    # The format from its first bytes only: decompressing (a bomb) is not for this thread.
    if not (data.startswith(COMPRESSED_MAGIC) or data[257:262] == b"ustar"):
        raise BadInput("archive: not a tar archive (plain, gzip, bzip2 or xz)")
    return data


def checkout(source: JobSource, settings: Settings, name: str, *, commit: str | None = None) -> tuple[Path, str | None]:
    """Materialise the job's code in a new directory ``name`` below the work dir.

    ``commit``: another commit of the same repository (a pull request's base) instead of
    the job's own. Returns the directory and, for git, the commit it holds.
    """
    directory = settings.work_dir / "jobs" / str(source.job_id) / name
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    if source.kind == "archive":
        try:
            unpack_archive(source.archive or b"", directory, settings)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return directory, None
    if commit is not None and not SHA.match(commit):
        raise SourceError(f"commit {commit!r}: not a commit id")
    return directory, _clone(source, settings, directory, commit)


def remove(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


# --- Archives ------------------------------------------------------------------------


def unpack_archive(data: bytes, directory: Path, settings: Settings) -> None:
    """Unpack a tarball into ``directory`` with lagtrace's own filter, whatever Python runs.

    Regular files and directories are written by lagtrace itself (no tarfile extraction),
    each new file created exclusively and without following links; a symlink is kept
    only when it is relative and stays inside the tree, and is made after every file,
    so no member is ever written through one. Hard links, devices and FIFOs are refused.
    Streamed (one pass), and stopped as soon as a cap is crossed: total bytes, member
    count, and unpacked/packed ratio (a decompression bomb is cut off early, not after).
    """
    limit = min(settings.max_archive_unpacked_bytes, int(max(len(data), 1) * settings.max_archive_ratio))
    written, members = 0, 0
    links: list[tuple[Path, str]] = []
    root = directory.resolve()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as archive:
            for member in archive:
                members += 1
                if members > settings.max_archive_members:
                    raise SourceError(f"archive: more than {settings.max_archive_members} members")
                target = _member_path(root, member.name)
                if target is None:
                    continue  # the archive's root itself (".")
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    if written + member.size > limit:
                        raise SourceError(_too_big(limit, len(data), settings))
                    target.parent.mkdir(parents=True, exist_ok=True)
                    written += _write_member(archive, member, target, limit - written)
                elif member.issym():
                    link = Path(member.linkname)
                    if link.is_absolute() or not (target.parent / link).resolve().is_relative_to(root):
                        raise SourceError(f"archive: link {member.name} points out of the tree ({member.linkname})")
                    links.append((target, member.linkname))
                else:
                    kind = "hard link" if member.islnk() else "special file"
                    raise SourceError(f"archive: {member.name} is a {kind}; only files, directories and links")
    except tarfile.TarError as exc:
        raise SourceError(f"archive: not a readable tar archive ({exc})") from None
    except (EOFError, zlib.error, lzma.LZMAError, OSError) as exc:
        if isinstance(exc, SourceError):
            raise
        raise SourceError(f"archive: cannot be unpacked ({exc})") from None
    for target, linkname in links:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(linkname, target)


def _too_big(limit: int, packed: int, settings: Settings) -> str:
    return (
        f"archive: unpacks to more than {limit} bytes (limits: {settings.max_archive_unpacked_bytes} bytes, "
        f"{settings.max_archive_ratio:g} times its {packed} packed bytes)"
    )


def _member_path(root: Path, name: str) -> Path | None:
    parts = PurePosixPath(name).parts
    if PurePosixPath(name).is_absolute() or ".." in parts or any("\0" in part for part in parts):
        raise SourceError(f"archive: member {name!r} would land outside the tree")
    parts = tuple(part for part in parts if part != ".")
    if not parts:
        return None
    target = root.joinpath(*parts)
    if not target.resolve().is_relative_to(root):
        raise SourceError(f"archive: member {name!r} would land outside the tree")
    return target


def _write_member(archive: tarfile.TarFile, member: tarfile.TarInfo, target: Path, room: int) -> int:
    source = archive.extractfile(member)
    if source is None:
        raise SourceError(f"archive: {member.name} cannot be read")
    mode = 0o755 if member.mode & 0o111 else 0o644  # no setuid, no world-writable
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        raise SourceError(f"archive: {member.name} appears twice") from None
    written = 0
    with os.fdopen(fd, "wb") as out:
        while chunk := source.read(1024 * 1024):
            written += len(chunk)
            if written > room:
                raise SourceError(f"archive: {member.name} is larger than its header says, or than the limit")
            out.write(chunk)
    return written


# --- git -------------------------------------------------------------------------------


def _git(settings: Settings, *args: str, cwd: Path) -> str:
    prefix = [
        "git",
        "-c",
        "advice.detachedHead=false",
        # Only https (and file where allowed): no ext::, ssh, git:// or http, also not
        # through a redirect or a submodule.
        "-c",
        "protocol.allow=never",
        "-c",
        "protocol.https.allow=always",
        "-c",
        "credential.helper=",
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.fsmonitor=false",
    ]
    if settings.allow_file_repositories:
        prefix += ["-c", "protocol.file.allow=always"]
    home = cwd.parent / f".git-home-{cwd.name}"
    home.mkdir(exist_ok=True)
    limit = settings.max_clone_bytes

    def cap_file_size() -> None:  # in the child: no single file (a pack) beyond the cap
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    try:
        done = subprocess.run(
            [*prefix, *args],
            cwd=cwd,
            env={**GIT_ENV, "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=settings.clone_timeout_s,
            preexec_fn=cap_file_size,
        )
    except subprocess.TimeoutExpired:
        raise SourceError(f"git {args[0]} took more than {settings.clone_timeout_s:g} s") from None
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if done.returncode == -signal.SIGXFSZ:
        raise SourceError(f"git {args[0]}: the repository is larger than {limit} bytes (LAGTRACE_MAX_CLONE_BYTES)")
    if done.returncode != 0:
        raise SourceError(f"git {args[0]} failed: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


def _clone(source: JobSource, settings: Settings, directory: Path, commit: str | None = None) -> str:
    # The resolved commit wins over the ref: every task of a job, and its reruns,
    # measure the same code even if the branch moved meanwhile.
    want = commit or source.commit_sha or source.ref or "HEAD"
    check_repository_url(source.repository_url or "", settings)
    _git(settings, "init", "--quiet", cwd=directory)
    # `--` everywhere a URL or ref follows: neither may become an option (--upload-pack=...).
    _git(settings, "remote", "add", "--", "origin", source.repository_url or "", cwd=directory)
    try:
        _git(settings, "fetch", "--quiet", "--no-tags", "--depth=1", "--", "origin", want, cwd=directory)
    except SourceError:
        if not SHA.match(want):
            raise
        # Servers that refuse to serve a bare commit: fetch the branches, then pick it.
        _git(settings, "fetch", "--quiet", "--no-tags", "--", "origin", cwd=directory)
        _git(settings, "checkout", "--quiet", want, "--", cwd=directory)
    else:
        _git(settings, "checkout", "--quiet", "FETCH_HEAD", "--", cwd=directory)
    size = _tree_bytes(directory)
    if size > settings.max_clone_bytes:
        raise SourceError(
            f"the repository is {size} bytes, more than {settings.max_clone_bytes} (LAGTRACE_MAX_CLONE_BYTES)"
        )
    return _git(settings, "rev-parse", "HEAD", cwd=directory)


def _tree_bytes(directory: Path) -> int:
    total = 0
    for parent, _, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(parent, name)).st_size
    return total


def repository_config(source: JobSource, settings: Settings, directory: Path) -> RepositoryConfig:
    """The job's `.lagtrace.yml`: the checkout's, or for a fork's pull request the base
    branch's, with no executor or image of its own (the fork chose neither)."""
    if source.config_commit_sha is None:
        return read_repository_config(directory)
    config = read_config_at(source, settings, directory, source.config_commit_sha)
    return config.model_copy(update={"executor": "docker", "image": None})


def read_config_at(source: JobSource, settings: Settings, directory: Path, commit: str) -> RepositoryConfig:
    """`.lagtrace.yml` as it is at ``commit`` (a fork's base branch), not in the checkout."""
    if not SHA.match(commit):
        raise BadInput(f"base commit {commit!r}: not a commit id")
    try:
        _git(settings, "fetch", "--quiet", "--no-tags", "--depth=1", "--", "origin", commit, cwd=directory)
        kind = _git(settings, "cat-file", "-t", f"{commit}:{REPOSITORY_CONFIG_FILE}", cwd=directory)
        mode = _git(settings, "ls-tree", commit, "--", REPOSITORY_CONFIG_FILE, cwd=directory).split(" ", 1)[0]
    except SourceError:
        raise BadInput(f"the base branch has no {REPOSITORY_CONFIG_FILE} at {commit[:12]}") from None
    if kind != "blob" or mode not in ("100644", "100755"):
        raise BadInput(f"{REPOSITORY_CONFIG_FILE} at {commit[:12]} is not a regular file")
    text = _git(settings, "cat-file", "blob", f"{commit}:{REPOSITORY_CONFIG_FILE}", cwd=directory)
    return parse_repository_config(text)


def read_repository_config(directory: Path) -> RepositoryConfig:
    """Parse `.lagtrace.yml`; BadInput names the field that is wrong."""
    path = directory / REPOSITORY_CONFIG_FILE
    if not path.exists() and not path.is_symlink():
        raise BadInput(f"the repository has no {REPOSITORY_CONFIG_FILE} (it names the command to screen)")
    # Not through a link (`.lagtrace.yml -> /etc/shadow` would echo a host file in the
    # error), only a regular file, and a bounded read.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise BadInput(f"{REPOSITORY_CONFIG_FILE}: cannot be read ({exc.strerror}; links are not followed)") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CONFIG_BYTES:
            raise BadInput(f"{REPOSITORY_CONFIG_FILE}: must be a regular file of at most {MAX_CONFIG_BYTES} bytes")
        raw = handle.read(MAX_CONFIG_BYTES)
    return parse_repository_config(raw.decode("utf-8", "replace"))


def parse_repository_config(text: str) -> RepositoryConfig:
    try:
        data = yaml.safe_load(text)
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
