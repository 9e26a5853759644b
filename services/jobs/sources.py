"""The code a service job measures: a git clone at a ref, or an uploaded tarball.

Every task that runs the command (on whatever node) makes its own copy in a fresh
directory and removes it afterwards, so nodes share nothing but the database.
"""

from __future__ import annotations

import contextlib
import errno
import io
import lzma
import os
import re
import resource
import secrets
import shutil
import signal
import stat
import subprocess
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any
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
    """Materialise the job's code in a directory of its own below the work dir.

    ``commit``: another commit of the same repository (a pull request's base) instead of
    the job's own. Returns the directory and, for git, the commit it holds.
    """
    if source.kind != "archive" and commit is not None and not SHA.match(commit):
        raise SourceError(f"commit {commit!r}: not a commit id")
    directory = new_checkout_directory(settings, f"{source.job_id}-{name}")
    try:
        if source.kind == "archive":
            unpack_archive(source.archive or b"", directory, settings)
            return directory, None
        return directory, _clone(source, settings, directory, commit)
    except BaseException:
        remove(directory)  # its name is this attempt's alone: nobody else would remove it
        raise


def new_checkout_directory(settings: Settings, prefix: str) -> Path:
    """A new, empty directory for one attempt of one step: ``<work dir>/jobs/<prefix>-<random>``.

    Never an existing one: two holders of the same step (one re-leased while the other still
    runs) each get their own, and no name can be prepared in advance by anyone. ``jobs`` is
    opened without following a link; one found there (planted by an unpacking that escaped,
    in an older version) is replaced by a directory. The work dir itself is the operator's
    and may be a link.
    """
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    work = os.open(settings.work_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        jobs = _own_directory(work, "jobs", settings.work_dir)
    finally:
        os.close(work)
    try:
        while True:
            name = f"{prefix}-{secrets.token_hex(8)}"
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, dir_fd=jobs)  # the umask's mode: the run containers read it
                return settings.work_dir / "jobs" / name
    finally:
        os.close(jobs)


def _own_directory(parent: int, name: str, where: Path) -> int:
    """A descriptor of the directory ``name`` in ``parent``, made if missing; whatever else
    is there (a link, a file) is removed first."""
    for _ in range(3):  # another worker may be replacing it at the same moment
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, dir_fd=parent)
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=parent)
    raise SourceError(f"{where / name} is not a directory and cannot be replaced by one")


def remove(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


# --- Archives ------------------------------------------------------------------------

# Each directory of the tree is opened from its parent, never by path, and never through a
# link: a link planted anywhere (by this archive or an earlier one) fails the walk instead.
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINK_HOPS = 40  # the kernel's own limit before ELOOP
Parts = tuple[str, ...]


def unpack_archive(data: bytes, directory: Path, settings: Settings) -> None:
    """Unpack a tarball into ``directory`` with lagtrace's own filter, whatever Python runs.

    Not tarfile's ``filter="data"``: it checks a link against the links already on disk
    (Python 3.11.7 here also predates its 3.11.13 fixes for CVE-2025-4517), which is the
    hole this replaces. Here every file and directory is created by an ``O_NOFOLLOW`` walk
    from the tree's root, files exclusively; no member may pass through a symlink member;
    symlinks are made last, each only if it resolves inside the tree with every link of the
    archive expanded (``p -> .`` then ``x -> p/p/../..`` is refused). Hard links only to a
    regular file unpacked before them; devices and FIFOs refused. Streamed (one pass) and
    stopped as soon as a cap is crossed: total bytes, member count, and unpacked/packed ratio
    (a decompression bomb is cut off early, not after).
    """
    limit = min(settings.max_archive_unpacked_bytes, int(max(len(data), 1) * settings.max_archive_ratio))
    written, members = 0, 0
    links: dict[Parts, str] = {}  # in archive order
    files: set[Parts] = set()
    tree = _Tree(os.open(directory, DIRECTORY_FLAGS))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as archive:
            for member in archive:
                members += 1
                if members > settings.max_archive_members:
                    raise SourceError(f"archive: more than {settings.max_archive_members} members")
                parts = _member_parts(member.name)
                if not parts:
                    continue  # the archive's root itself (".")
                for depth in range(1, len(parts)):
                    if parts[:depth] in links:
                        raise SourceError(
                            f"archive: {member.name} lies below the link {'/'.join(parts[:depth])}; "
                            "nothing is unpacked through a link"
                        )
                if member.isdir():
                    os.close(tree.directory(parts, member.name))
                elif member.isfile():
                    if written + member.size > limit:
                        raise SourceError(_too_big(limit, len(data), settings))
                    written += _write_member(archive, member, tree, parts, limit - written)
                    files.add(parts)
                elif member.issym():
                    if parts in links:
                        raise SourceError(f"archive: {member.name} appears twice")
                    links[parts] = member.linkname
                elif member.islnk():
                    _hard_link(tree, member, parts, files)
                    files.add(parts)
                else:
                    raise SourceError(f"archive: {member.name} is a special file; only files, directories and links")
        for parts, linkname in links.items():
            _make_link(tree, parts, linkname, links)
    except tarfile.TarError as exc:
        raise SourceError(f"archive: not a readable tar archive ({exc})") from None
    except (EOFError, zlib.error, lzma.LZMAError, OSError) as exc:
        if isinstance(exc, SourceError):
            raise
        raise SourceError(f"archive: cannot be unpacked ({exc})") from None
    finally:
        tree.close()


class _Tree:
    """The unpacked tree, reached only through directory descriptors opened without
    following links; the last parent directory stays open (members come grouped by it)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self._cached: tuple[Parts, int] | None = None

    def directory(self, parts: Parts, name: str) -> int:
        """A new descriptor of directory ``parts``, made (with its parents) if missing."""
        fd = os.dup(self.root)
        try:
            for part in parts:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
                below = os.open(part, DIRECTORY_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = below
        except OSError as exc:
            os.close(fd)
            raise SourceError(
                f"archive: {name}: {'/'.join(parts)} is not a directory of the tree ({exc.strerror}); "
                "nothing is unpacked through a link"
            ) from None
        return fd

    def parent(self, parts: Parts, name: str) -> int:
        """The directory that holds ``parts``, owned by the tree (not to be closed)."""
        if self._cached is None or self._cached[0] != parts[:-1]:
            fd = self.directory(parts[:-1], name)
            if self._cached is not None:
                os.close(self._cached[1])
            self._cached = (parts[:-1], fd)
        return self._cached[1]

    def close(self) -> None:
        if self._cached is not None:
            os.close(self._cached[1])
        os.close(self.root)


def _too_big(limit: int, packed: int, settings: Settings) -> str:
    return (
        f"archive: unpacks to more than {limit} bytes (limits: {settings.max_archive_unpacked_bytes} bytes, "
        f"{settings.max_archive_ratio:g} times its {packed} packed bytes)"
    )


def _member_parts(name: str) -> Parts:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\0" in name:
        raise SourceError(f"archive: member {name!r} would land outside the tree")
    return tuple(part for part in path.parts if part != ".")


def _write_member(archive: tarfile.TarFile, member: tarfile.TarInfo, tree: _Tree, parts: Parts, room: int) -> int:
    source = archive.extractfile(member)
    if source is None:
        raise SourceError(f"archive: {member.name} cannot be read")
    mode = 0o755 if member.mode & 0o111 else 0o644  # no setuid, no world-writable
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(parts[-1], flags, mode, dir_fd=tree.parent(parts, member.name))
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


def _hard_link(tree: _Tree, member: tarfile.TarInfo, parts: Parts, files: set[Parts]) -> None:
    # A hard link names another member of the archive (not a path relative to the link);
    # only one already unpacked as a regular file, so it can only share an inode of the tree.
    try:
        source = _member_parts(member.linkname)
    except SourceError:
        source = ()
    if source not in files:
        raise SourceError(
            f"archive: hard link {member.name} -> {member.linkname}: only to a regular file unpacked before it"
        )
    target_dir = tree.directory(parts[:-1], member.name)
    try:
        os.link(
            source[-1],
            parts[-1],
            src_dir_fd=tree.parent(source, member.linkname),
            dst_dir_fd=target_dir,
            follow_symlinks=False,
        )
    except FileExistsError:
        raise SourceError(f"archive: {member.name} appears twice") from None
    finally:
        os.close(target_dir)


def _make_link(tree: _Tree, parts: Parts, linkname: str, links: dict[Parts, str]) -> None:
    name = "/".join(parts)
    if _resolve_link(parts, links) is None:
        raise SourceError(f"archive: link {name} points out of the tree, or loops ({linkname})")
    parent = tree.directory(parts[:-1], name)
    try:
        os.symlink(linkname, parts[-1], dir_fd=parent)
    except FileExistsError:
        raise SourceError(f"archive: {name} is both a link and a file or directory") from None
    finally:
        os.close(parent)


def _resolve_link(parts: Parts, links: dict[Parts, str]) -> Parts | None:
    """Where the link ``parts`` leads, as the kernel would resolve it once the tree is
    unpacked (the tree holds nothing but the archive's members, so expanding the archive's
    own links is exact); None if it leaves the tree, is absolute, or loops."""
    here = list(parts[:-1])  # the directory reached so far, no link in it
    pending: list[str] = []  # components still to walk, the next on top
    target: str | None = links[parts]  # a link's text, read from the directory ``here``
    hops = 0
    while True:
        if target is not None:
            hops += 1
            if target.startswith("/") or "\0" in target or hops > MAX_LINK_HOPS:
                return None
            pending += _components(target)
            target = None
        if not pending:
            return tuple(here)
        part = pending.pop()
        if part == "..":
            if not here:
                return None
            here.pop()
        elif (*here, part) in links:
            target = links[(*here, part)]
        else:
            here.append(part)


def _components(linkname: str) -> list[str]:
    """A link's target as a stack of components, the first on top."""
    return [part for part in reversed(linkname.split("/")) if part not in ("", ".")]


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
    return "; ".join(f"{field_path(error['loc'])}: {error_message(error)}" for error in exc.errors())


def validation_problems(exc: ValidationError, prefix: str = "") -> list[dict[str, str]]:
    """pydantic's errors as {field, message} pairs, as the API's error body and the pages show them."""
    return [{"field": prefix + field_path(e["loc"]), "message": error_message(e)} for e in exc.errors()]


def error_message(error: Any) -> str:
    """One pydantic error's message as our validators wrote it: pydantic prefixes a
    validator's ValueError with "Value error, " (and an assert with "Assertion failed, "),
    its own wording, not the user's concern (pydantic docs, "Error Handling")."""
    raised = (error.get("ctx") or {}).get("error")
    if error.get("type") in ("value_error", "assertion_error") and isinstance(raised, Exception) and str(raised):
        return str(raised)
    return str(error["msg"])


def field_path(loc: tuple) -> str:
    return ".".join(str(part) for part in loc) or "(body)"
