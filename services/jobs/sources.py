"""The code a service job measures: a git clone at a ref, or an uploaded tarball.

Every task that runs the command (on whatever node) makes its own copy in a fresh
directory and removes it afterwards, so nodes share nothing but the database.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import fcntl
import ipaddress
import json
import logging
import lzma
import os
import re
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import ValidationError

from services.errors import BadInput, LagtraceError
from services.jobs import unpack as unpacker
from services.jobs.spec import REPOSITORY_CONFIG_FILE, RepositoryConfig
from services.measure.install import read_regular_file
from services.models import JobSource
from services.settings import Settings

log = logging.getLogger("lagtrace.sources")
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
        check_repository_host(parts.hostname, settings)
        return url
    if parts.scheme == "file" or (not parts.scheme and url.startswith("/")):
        if settings.allow_file_repositories:
            return url
        raise BadInput(
            f"repository.url {url!r}: local repositories are off on this server (LAGTRACE_ALLOW_FILE_REPOSITORIES)"
        )
    raise BadInput(f"repository.url {url!r}: only https:// git URLs are accepted")


def check_repository_host(host: str, settings: Settings) -> None:
    """The host must be allowed (LAGTRACE_REPOSITORY_HOSTS); an address given as the host
    must also be a global one (its resolution is checked where the clone is made)."""
    allowed = settings.repository_host_list
    if "*" not in allowed and host.lower() not in allowed:
        raise BadInput(
            f"repository.url: the host {host} is not one repositories may be cloned from "
            f"({', '.join(allowed)}; LAGTRACE_REPOSITORY_HOSTS)"
        )
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return
    problem = _address_problem(address, settings)
    if problem:
        raise BadInput(f"repository.url: {host} is {problem}")


def _address_problem(address: ipaddress.IPv4Address | ipaddress.IPv6Address, settings: Settings) -> str | None:
    """Why ``address`` may not be cloned from, or None."""
    if any(address in ipaddress.ip_network(net, strict=False) for net in settings.repository_allowed_networks):
        return None
    if address.is_global:
        return None
    kind = next(
        (
            name
            for name, flag in (
                ("a loopback", address.is_loopback),
                ("a link-local", address.is_link_local),
                ("a private", address.is_private),
            )
            if flag
        ),
        "a non-global",
    )
    return f"{kind} address ({address}); allow its network with LAGTRACE_REPOSITORY_ALLOWED_NETWORKS"


def resolve_repository_host(url: str, settings: Settings) -> tuple[str, int, list[str]]:
    """The host, port and every address of an https repository URL, each checked as
    ``check_repository_host`` checks a literal one; SourceError if any is refused."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise SourceError(f"repository host {host}: cannot be resolved ({exc})") from None
    addresses = sorted({str(info[4][0]) for info in found})
    for text in addresses:
        problem = _address_problem(ipaddress.ip_address(text.split("%", 1)[0]), settings)
        if problem:
            raise SourceError(f"repository host {host} resolves to {problem}")
    return host, port, addresses


def check_ref(ref: str) -> str:
    if not REF.match(ref) or ".." in ref or ref.startswith("-"):
        raise BadInput(f"repository.ref {ref!r}: not a branch, tag or commit name")
    return ref


def check_archive(data: bytes, settings: Settings) -> bytes:
    """The size, and that it holds something, in the request: unpacking (and refusing
    bombs) is the worker's."""
    if len(data) > settings.max_archive_bytes:
        raise BadInput(f"archive: {len(data)} bytes, more than the {settings.max_archive_bytes} allowed")
    if _holds_nothing(data):
        raise BadInput("archive: the archive is empty (no file in it to run)", field="archive")
    # The format from its first bytes only: decompressing (a bomb) is not for this thread.
    if not (data.startswith(COMPRESSED_MAGIC) or data[257:262] == b"ustar"):
        raise BadInput("archive: not a tar archive (plain, gzip, bzip2 or xz)")
    return data


TAR_BLOCK = 512


def _holds_nothing(data: bytes) -> bool:
    """Whether the upload holds no member: a tar archive that holds nothing is its end
    marker alone, zero blocks (tar(5)), which is what `tar -c` of nothing writes; no bytes
    at all, or a compressed stream of none, is empty too. Only the first 512-byte block is
    read, decompressed at most that far: a bomb costs nothing here."""
    try:
        if data.startswith(b"\x1f\x8b"):
            block = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, TAR_BLOCK)
        elif data.startswith(b"BZh"):
            block = bz2.BZ2Decompressor().decompress(data, max_length=TAR_BLOCK)
        elif data.startswith(b"\xfd7zXZ\x00"):
            block = lzma.LZMADecompressor().decompress(data, max_length=TAR_BLOCK)
        else:
            block = data[:TAR_BLOCK]
    except (zlib.error, OSError, EOFError, lzma.LZMAError):
        return False  # unreadable: the unpacker says so
    return not block.strip(b"\0")


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
                if _hold(jobs, name):
                    return settings.work_dir / "jobs" / name
    finally:
        os.close(jobs)


# Each live checkout is held by its process with an exclusive flock on the directory, until
# ``remove``; the kernel drops the lock when the process dies, however it dies (SIGKILL, the
# OOM killer, a restarted container), so a checkout nobody holds is a dead attempt's.
_held: dict[str, int] = {}
_held_lock = threading.Lock()


def _hold(jobs: int, name: str) -> bool:
    """Lock the new checkout ``name``; False if a sweep removed it before the lock was taken
    (the sweep holds the lock while it removes, so this waits for it, then sees it gone)."""
    try:
        fd = os.open(name, unpacker.DIRECTORY_FLAGS, dir_fd=jobs)
    except FileNotFoundError:
        return False
    fcntl.flock(fd, fcntl.LOCK_EX)
    if os.fstat(fd).st_nlink == 0:
        os.close(fd)
        return False
    with _held_lock:
        _held[_key(jobs, name)] = fd
    return True


def _key(jobs: int, name: str) -> str:
    return f"{os.fstat(jobs).st_ino}/{name}"


def _release(directory: Path) -> None:
    try:
        jobs = os.open(directory.parent, unpacker.DIRECTORY_FLAGS)
    except OSError:
        return
    try:
        with _held_lock:
            fd = _held.pop(_key(jobs, directory.name), None)
    finally:
        os.close(jobs)
    if fd is not None:
        os.close(fd)


def sweep_checkouts(settings: Settings) -> list[str]:
    """Remove the checkouts below the work dir that no live process holds (an attempt that
    was killed never removed its own), and git's scratch homes beside them; the names
    removed. Safe beside live attempts of any process sharing the work dir."""
    try:
        jobs = os.open(settings.work_dir / "jobs", unpacker.DIRECTORY_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    try:
        names = sorted(os.listdir(jobs))
        for name in names:
            if name.startswith(".git-home-"):
                continue  # with its checkout, below
            try:
                fd = os.open(name, unpacker.DIRECTORY_FLAGS, dir_fd=jobs)
            except OSError:
                continue  # gone meanwhile, or not a directory (nothing this code makes)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live attempt's
                # Ours now: removed while locked, so a new checkout that just took this name
                # waits and then sees it gone (``_hold``).
                unpacker.remove_tree(settings.work_dir / "jobs" / name)
                removed.append(name)
            finally:
                os.close(fd)
        for name in names:
            if name.startswith(".git-home-") and not os.path.lexists(settings.work_dir / "jobs" / name[10:]):
                unpacker.remove_tree(settings.work_dir / "jobs" / name)
                removed.append(name)
    finally:
        os.close(jobs)
    return removed


def sweep_forever(settings: Settings, stop: threading.Event) -> None:
    """``sweep_checkouts`` now and every LAGTRACE_CHECKOUT_SWEEP_INTERVAL_S until ``stop``."""
    while True:
        try:
            removed = sweep_checkouts(settings)
            if removed:
                log.info("removed %d checkouts of attempts that died: %s", len(removed), ", ".join(removed[:10]))
        except Exception:
            log.exception("sweeping dead checkouts failed; trying again later")
        if stop.wait(settings.checkout_sweep_interval_s):
            return


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


def remove(directory: Path) -> bool:
    """Remove a checkout, however deep (not shutil.rmtree: it recurses once per level in
    this Python); True if nothing of it is left."""
    gone = unpacker.remove_tree(directory)
    _release(directory)
    return gone


# --- Archives ------------------------------------------------------------------------


def archive_limits(settings: Settings, packed: int) -> unpacker.Limits:
    return unpacker.Limits(
        packed=packed,
        unpacked_bytes=settings.max_archive_unpacked_bytes,
        ratio=settings.max_archive_ratio,
        members=settings.max_archive_members,
        path_bytes=settings.max_archive_path_bytes,
        path_depth=settings.max_archive_path_depth,
        header_bytes=settings.max_archive_header_bytes,
        memory_bytes=settings.max_archive_memory_bytes,
        cpu_s=settings.max_archive_cpu_s,
    )


@dataclass(frozen=True)
class Unpacked:
    """What unpacking cost the child process that did it."""

    peak_rss_bytes: int
    cpu_s: float
    wall_s: float


class ArchiveRefused(SourceError):
    """An archive the unpacker refused; ``usage`` is what the child spent on it (None if it
    was killed before it could say)."""

    def __init__(self, message: str, usage: Unpacked | None = None):
        super().__init__(message)
        self.usage = usage


def unpack_archive(data: bytes, directory: Path, settings: Settings) -> Unpacked:
    """Unpack a tarball into ``directory`` in a child process with memory, CPU and time caps
    (services/jobs/unpack.py says what it refuses and how).

    The child is this Python running that module as a script, isolated (``-I -S``: no
    site, no environment, nothing of the worker's own imports), with the archive on its
    stdin and ``directory`` as its one inherited descriptor.
    """
    limits = archive_limits(settings, len(data))
    root = os.open(directory, unpacker.DIRECTORY_FLAGS)
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", unpacker.__file__, unpacker.as_arguments(limits), str(root)],
            input=data,
            capture_output=True,
            pass_fds=(root,),
            timeout=settings.archive_unpack_timeout_s,
            env={"PATH": GIT_ENV["PATH"]},
        )
    except subprocess.TimeoutExpired:
        raise ArchiveRefused(
            f"archive: unpacking it takes more than {settings.archive_unpack_timeout_s:g} s "
            "(LAGTRACE_ARCHIVE_UNPACK_TIMEOUT_S)"
        ) from None
    finally:
        os.close(root)
    wall_s = time.monotonic() - started
    if done.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        raise ArchiveRefused(limits.no_cpu())
    if done.returncode == -signal.SIGXFSZ:
        raise ArchiveRefused(limits.too_big())
    if done.returncode == unpacker.EXIT_NO_MEMORY:
        raise ArchiveRefused(limits.no_memory())
    try:
        result = json.loads(done.stdout.decode().strip().splitlines()[-1])
        usage = Unpacked(int(result["peak_rss_bytes"]), float(result["cpu_s"]), wall_s)
    except (ValueError, IndexError, KeyError):
        if b"MemoryError" in done.stderr:
            raise ArchiveRefused(limits.no_memory()) from None
        tail = done.stderr.decode(errors="replace").strip()[-300:]
        raise SourceError(f"archive: the unpacker failed (exit {done.returncode}): {tail}") from None
    if "error" in result:
        raise ArchiveRefused(str(result["error"]), usage)
    return usage


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


def _origin(source: JobSource, settings: Settings, directory: Path) -> None:
    """An empty repository in ``directory`` whose origin is the job's repository URL."""
    check_repository_url(source.repository_url or "", settings)
    _git(settings, "init", "--quiet", cwd=directory)
    if urlsplit(source.repository_url or "").scheme in REMOTE_SCHEMES:
        # git connects to the addresses checked here and nowhere else: not to what a second
        # lookup (DNS rebinding) or a redirect would name.
        host, port, addresses = resolve_repository_host(source.repository_url or "", settings)
        _git(settings, "config", "http.curloptResolve", f"{host}:{port}:{','.join(addresses)}", cwd=directory)
        _git(settings, "config", "http.followRedirects", "false", cwd=directory)
    # `--` everywhere a URL or ref follows: neither may become an option (--upload-pack=...).
    _git(settings, "remote", "add", "--", "origin", source.repository_url or "", cwd=directory)


def checkout_history(source: JobSource, settings: Settings, name: str) -> Path:
    """The job's repository with the whole history of its branches and tags, nothing
    checked out: a bisect makes a worktree of each commit it measures across a range, which
    the one commit ``checkout`` fetches (``--depth=1``) does not hold (services/jobs/bisect_step.py)."""
    directory = new_checkout_directory(settings, f"{source.job_id}-{name}")
    try:
        _origin(source, settings, directory)
        _git(
            settings,
            "fetch",
            "--quiet",
            "--tags",
            "--",
            "origin",
            "+refs/heads/*:refs/remotes/origin/*",
            cwd=directory,
        )
        size = _tree_bytes(directory)
        if size > settings.max_clone_bytes:
            raise SourceError(
                f"the repository's history is {size} bytes, more than {settings.max_clone_bytes} "
                "(LAGTRACE_MAX_CLONE_BYTES)"
            )
        return directory
    except BaseException:
        remove(directory)
        raise


def resolve_commit(settings: Settings, directory: Path, rev: str, field: str) -> str:
    """The commit ``rev`` names in a ``checkout_history``: a commit (full or abbreviated),
    a tag, or a branch of origin; a full commit id on no branch is fetched alone. BadInput
    names ``field`` and the revision."""
    check_ref(rev)
    for candidate in (rev, f"origin/{rev}"):
        try:
            return _git(
                settings,
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                f"{candidate}^{{commit}}",
                cwd=directory,
            )
        except SourceError:
            continue
    if SHA.match(rev):
        try:
            _git(settings, "fetch", "--quiet", "--no-tags", "--", "origin", rev, cwd=directory)
            return _git(settings, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=directory)
        except SourceError:
            pass
    raise BadInput(f"{field} {rev!r}: no such commit, branch or tag in the repository", field=field)


def git_in(settings: Settings) -> Callable[..., str]:
    """``git(where, *args)`` run as every git command of a job is (``_git``: no hooks, no
    user configuration, the clone's limits): a bisect's worktrees are made with it."""

    def git(where: Path, *args: str) -> str:
        return _git(settings, *args, cwd=where)

    return git


def _clone(source: JobSource, settings: Settings, directory: Path, commit: str | None = None) -> str:
    # The resolved commit wins over the ref: every task of a job, and its reruns,
    # measure the same code even if the branch moved meanwhile.
    want = commit or source.commit_sha or source.ref or "HEAD"
    _origin(source, settings, directory)
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
    except SourceError:
        raise BadInput(f"the base branch has no {REPOSITORY_CONFIG_FILE} at {commit[:12]}") from None
    return config_in_history(settings, directory, commit, "the base branch")


def config_in_history(
    settings: Settings, directory: Path, commit: str, whose: str = "the repository"
) -> RepositoryConfig:
    """`.lagtrace.yml` as it is at ``commit``, a commit the clone in ``directory`` holds."""
    try:
        kind = _git(settings, "cat-file", "-t", f"{commit}:{REPOSITORY_CONFIG_FILE}", cwd=directory)
        mode = _git(settings, "ls-tree", commit, "--", REPOSITORY_CONFIG_FILE, cwd=directory).split(" ", 1)[0]
    except SourceError:
        raise BadInput(f"{whose} has no {REPOSITORY_CONFIG_FILE} at {commit[:12]}") from None
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
    raw = read_regular_file(path, MAX_CONFIG_BYTES)
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
