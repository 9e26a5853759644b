"""Unpacking an uploaded tarball, bounded in every dimension, in a child process of its own.

This module is also the child's program: ``sources.unpack_archive`` runs it as a script
(``python -I -S unpack.py LIMITS FD``) with the archive on stdin and the checkout directory
as an inherited descriptor, so it imports nothing but the standard library. The child
first caps its own address space (RLIMIT_AS), CPU time (RLIMIT_CPU) and file size, then
streams the archive; the parent bounds its wall time. Whatever an archive makes the
unpacking do (a decompressor's dictionary, a header read whole, a loop), it does it in a
process that the kernel stops at the cap, never in the worker or ``serve``.

What the stream itself may hold is capped before it is read (tarfile reads an extended
header whole): each PAX/GNU header's size, the headers in a row, the members (headers and
directories included), the bytes (file data, headers and link text), and every path and
link target's length and depth. Link resolution walks a tree of the archive's links, each
component once, so its cost is linear in the text it reads.

Removal (``remove_tree``) walks the tree iteratively, one directory descriptor at a time:
shutil.rmtree in Python 3.11 recurses once per level (RecursionError on a deep tree, the
tree left on disk) and os.walk does too.
"""

from __future__ import annotations

import contextlib
import errno
import json
import lzma
import os
import resource
import sys
import tarfile
import zlib
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath
from typing import IO

# Each directory of the tree is opened from its parent, never by path, and never through a
# link: a link planted anywhere (by this archive or an earlier one) fails the walk instead.
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINK_HOPS = 40  # the kernel's own limit before ELOOP
# Extended headers (PAX, GNU long name/link) that may precede one member: tarfile reads a
# chain of them by recursion, one Python frame each.
MAX_HEADERS_IN_A_ROW = 8
EXTENDED_TYPES = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)
# The child's exit code when it ran out of memory before it could say so.
EXIT_NO_MEMORY = 3
Parts = tuple[str, ...]


class Refused(Exception):
    """The archive is refused: the message says why and, for a cap, which setting raises it."""


@dataclass(frozen=True)
class Limits:
    """The caps, as the settings give them (services/settings.py); ``packed`` is the upload's size."""

    packed: int
    unpacked_bytes: int
    ratio: float
    members: int
    path_bytes: int
    path_depth: int
    header_bytes: int
    memory_bytes: int
    cpu_s: int

    @property
    def byte_cap(self) -> int:
        return min(self.unpacked_bytes, int(max(self.packed, 1) * self.ratio))

    def too_big(self) -> str:
        return (
            f"archive: unpacks to more than {self.byte_cap} bytes, headers and link text included (limits: "
            f"{self.unpacked_bytes} bytes, LAGTRACE_MAX_ARCHIVE_UNPACKED_BYTES; {self.ratio:g} times its "
            f"{self.packed} packed bytes, LAGTRACE_MAX_ARCHIVE_RATIO)"
        )

    def no_memory(self) -> str:
        return (
            f"archive: unpacking it needs more than {self.memory_bytes} bytes of memory "
            "(LAGTRACE_MAX_ARCHIVE_MEMORY_BYTES)"
        )

    def no_cpu(self) -> str:
        return f"archive: unpacking it takes more than {self.cpu_s} s of CPU (LAGTRACE_MAX_ARCHIVE_CPU_S)"


class _Budget:
    """What the archive has spent so far; every charge checks its cap first."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.bytes = 0
        self.members = 0
        self.headers_in_a_row = 0

    def member(self) -> None:
        self.members += 1
        if self.members > self.limits.members:
            raise Refused(
                f"archive: more than {self.limits.members} members, directories and extended headers "
                "included (LAGTRACE_MAX_ARCHIVE_MEMBERS)"
            )

    def spend(self, size: int) -> None:
        if self.bytes + size > self.limits.byte_cap:
            raise Refused(self.limits.too_big())
        self.bytes += size

    def header(self, kind: bytes, size: int) -> None:
        """An extended header of ``size`` bytes is about to be read whole."""
        self.member()
        self.headers_in_a_row += 1
        if self.headers_in_a_row > MAX_HEADERS_IN_A_ROW:
            raise Refused(f"archive: more than {MAX_HEADERS_IN_A_ROW} extended headers in a row before a member")
        if size > self.limits.header_bytes:
            what = "PAX" if kind in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE) else "GNU long-name"
            raise Refused(
                f"archive: a {what} header of {size} bytes, more than {self.limits.header_bytes} "
                "(LAGTRACE_MAX_ARCHIVE_HEADER_BYTES)"
            )
        self.spend(tarfile.BLOCKSIZE + size)

    def check_path(self, name: str, what: str) -> None:
        if len(name.encode("utf-8", "surrogateescape")) > self.limits.path_bytes:
            raise Refused(
                f"archive: a {what} longer than {self.limits.path_bytes} bytes ({name[:60]!r}...) "
                "(LAGTRACE_MAX_ARCHIVE_PATH_BYTES)"
            )
        depth = sum(1 for part in name.split("/") if part not in ("", "."))
        if depth > self.limits.path_depth:
            raise Refused(
                f"archive: a {what} nested deeper than {self.limits.path_depth} directories "
                f"({depth} components, {name[:60]!r}...) (LAGTRACE_MAX_ARCHIVE_PATH_DEPTH)"
            )


def _header_class(budget: _Budget) -> type[tarfile.TarInfo]:
    """A TarInfo that charges each extended header to ``budget`` before tarfile reads it."""

    class Header(tarfile.TarInfo):
        def _proc_member(self, tarfile_):
            if self.type == tarfile.GNUTYPE_SPARSE:
                # Its extension blocks are read in an unbounded loop, and a checkout needs none.
                raise Refused(f"archive: {self.name} is a sparse file; only files, directories and links")
            if self.type in EXTENDED_TYPES:
                budget.header(self.type, self.size)
            else:
                budget.headers_in_a_row = 0
            # typeshed leaves out tarfile's private _proc_member, which every TarInfo has.
            return super()._proc_member(tarfile_)  # type: ignore[misc]

    return Header


class _Node:
    """One directory (or link) of the archive's link tree: only the paths that lead to a link."""

    __slots__ = ("children", "link")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.link: str | None = None


class _Links:
    """The archive's symlinks, as a tree of their paths: finding whether a path passes
    through one, or where one leads, walks each component once."""

    def __init__(self) -> None:
        self.root = _Node()
        self.in_order: list[tuple[Parts, str]] = []

    def add(self, parts: Parts, target: str) -> None:
        node = self.root
        for part in parts:
            node = node.children.setdefault(part, _Node())
        if node.link is not None:
            raise Refused(f"archive: {'/'.join(parts)} appears twice")
        node.link = target
        self.in_order.append((parts, target))

    def link_above(self, parts: Parts) -> Parts | None:
        """The link among the parents of ``parts``, if any."""
        node = self.root
        for depth, part in enumerate(parts[:-1], 1):
            found = node.children.get(part)
            if found is None:
                return None
            if found.link is not None:
                return parts[:depth]
            node = found
        return None

    def resolves_inside(self, parts: Parts) -> bool:
        """Whether the link ``parts`` leads into the tree, as the kernel would resolve it once
        the tree is unpacked (the tree holds nothing but the archive's members, so expanding
        the archive's own links is exact); False if it leaves the tree, is absolute, or loops."""
        # The directories walked so far, from the root; None for one no link lies below.
        here: list[_Node | None] = [self.root]
        for part in parts[:-1]:
            top = here[-1]
            here.append(top.children.get(part) if top is not None else None)
        pending: list[str] = []  # components still to walk, the next on top
        node = here[-1]
        target: str | None = node.children[parts[-1]].link if node is not None else None
        hops = 0
        while True:
            if target is not None:
                hops += 1
                if target.startswith("/") or "\0" in target or hops > MAX_LINK_HOPS:
                    return False
                pending += _components(target)
                target = None
            if not pending:
                return True
            part = pending.pop()
            if part == "..":
                if len(here) == 1:
                    return False
                here.pop()
                continue
            top = here[-1]
            child = top.children.get(part) if top is not None else None
            if child is not None and child.link is not None:
                target = child.link  # read from the directory ``here``
            else:
                here.append(child)


def _components(linkname: str) -> list[str]:
    """A link's target as a stack of components, the first on top."""
    return [part for part in reversed(linkname.split("/")) if part not in ("", ".")]


class _Tree:
    """The unpacked tree, reached only through directory descriptors opened without
    following links; the last directory reached stays open (members come grouped by it,
    and a nested directory is opened from its parent, not from the root again)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self._cached: tuple[Parts, int] | None = None

    def directory(self, parts: Parts, name: str) -> int:
        """A new descriptor of directory ``parts``, made (with its parents) if missing."""
        start: Parts = ()
        if self._cached is not None and parts[: len(self._cached[0])] == self._cached[0]:
            start = self._cached[0]
            fd = os.dup(self._cached[1])
        else:
            fd = os.dup(self.root)
        try:
            for part in parts[len(start) :]:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
                below = os.open(part, DIRECTORY_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = below
        except OSError as exc:
            os.close(fd)
            raise Refused(
                f"archive: {name}: {'/'.join(parts)} is not a directory of the tree ({exc.strerror}); "
                "nothing is unpacked through a link"
            ) from None
        return fd

    def parent(self, parts: Parts, name: str) -> int:
        """The directory that holds ``parts``, owned by the tree (not to be closed)."""
        return self.keep(parts[:-1], name)

    def keep(self, parts: Parts, name: str) -> int:
        if self._cached is None or self._cached[0] != parts:
            fd = self.directory(parts, name)
            if self._cached is not None:
                os.close(self._cached[1])
            self._cached = (parts, fd)
        return self._cached[1]

    def close(self) -> None:
        if self._cached is not None:
            os.close(self._cached[1])
        os.close(self.root)


def _member_parts(name: str) -> Parts:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\0" in name:
        raise Refused(f"archive: member {name!r} would land outside the tree")
    return tuple(part for part in path.parts if part != ".")


def unpack(stream: IO[bytes], root: int, limits: Limits) -> None:
    """Unpack the tarball read from ``stream`` into the directory ``root`` (a descriptor,
    closed here), with lagtrace's own filter, whatever Python runs.

    Not tarfile's ``filter="data"``: it checks a link against the links already on disk
    (Python 3.11.7 here also predates its 3.11.13 fixes for CVE-2025-4517). Here every file
    and directory is created by an ``O_NOFOLLOW`` walk from the tree's root, files
    exclusively; no member may pass through a symlink member; symlinks are made last, each
    only if it resolves inside the tree with every link of the archive expanded (``p -> .``
    then ``x -> p/p/../..`` is refused). Hard links only to a regular file unpacked before
    them; devices, FIFOs and sparse files refused. Streamed (one pass) and stopped as soon
    as a cap is crossed (a decompression bomb is cut off early, not after).
    """
    budget = _Budget(limits)
    links = _Links()
    files: set[Parts] = set()
    tree = _Tree(root)
    try:
        with tarfile.open(fileobj=stream, mode="r|*", tarinfo=_header_class(budget)) as archive:
            for member in archive:
                budget.member()
                budget.check_path(member.name, "path")
                # Its header block; a directory or a link costs that much, a file its data too.
                budget.spend(tarfile.BLOCKSIZE + (len(member.linkname) if member.issym() or member.islnk() else 0))
                if member.sparse is not None:
                    raise Refused(f"archive: {member.name} is a sparse file; only files, directories and links")
                parts = _member_parts(member.name)
                if not parts:
                    continue  # the archive's root itself (".")
                above = links.link_above(parts)
                if above is not None:
                    raise Refused(
                        f"archive: {member.name} lies below the link {'/'.join(above)}; "
                        "nothing is unpacked through a link"
                    )
                if member.isdir():
                    tree.keep(parts, member.name)
                elif member.isfile():
                    budget.spend(member.size)
                    _write_member(archive, member, tree, parts)
                    files.add(parts)
                elif member.issym():
                    budget.check_path(member.linkname, "link target")
                    links.add(parts, member.linkname)
                elif member.islnk():
                    budget.check_path(member.linkname, "link target")
                    _hard_link(tree, member, parts, files)
                    files.add(parts)
                else:
                    raise Refused(f"archive: {member.name} is a special file; only files, directories and links")
        for parts, linkname in links.in_order:
            _make_link(tree, parts, linkname, links)
    except (Refused, MemoryError):
        raise
    except tarfile.TarError as exc:
        raise Refused(f"archive: not a readable tar archive ({exc})") from None
    except RecursionError:
        raise Refused("archive: its headers nest too deeply to be read") from None
    except (EOFError, OSError, ValueError, zlib.error, lzma.LZMAError) as exc:
        if isinstance(exc, lzma.LZMAError) and "memory" in str(exc).lower():
            raise MemoryError from None
        raise Refused(f"archive: cannot be unpacked ({exc})") from None
    finally:
        tree.close()


def _write_member(archive: tarfile.TarFile, member: tarfile.TarInfo, tree: _Tree, parts: Parts) -> None:
    source = archive.extractfile(member)
    if source is None:
        raise Refused(f"archive: {member.name} cannot be read")
    mode = 0o755 if member.mode & 0o111 else 0o644  # no setuid, no world-writable
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(parts[-1], flags, mode, dir_fd=tree.parent(parts, member.name))
    except FileExistsError:
        raise Refused(f"archive: {member.name} appears twice") from None
    written = 0
    with os.fdopen(fd, "wb") as out:
        while chunk := source.read(1024 * 1024):
            written += len(chunk)
            if written > member.size:
                raise Refused(f"archive: {member.name} is larger than its header says")
            out.write(chunk)


def _hard_link(tree: _Tree, member: tarfile.TarInfo, parts: Parts, files: set[Parts]) -> None:
    # A hard link names another member of the archive (not a path relative to the link);
    # only one already unpacked as a regular file, so it can only share an inode of the tree.
    try:
        source = _member_parts(member.linkname)
    except Refused:
        source = ()
    if source not in files:
        raise Refused(
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
        raise Refused(f"archive: {member.name} appears twice") from None
    finally:
        os.close(target_dir)


def _make_link(tree: _Tree, parts: Parts, linkname: str, links: _Links) -> None:
    name = "/".join(parts)
    if not links.resolves_inside(parts):
        raise Refused(f"archive: link {name} points out of the tree, or loops ({linkname[:200]})")
    parent = tree.directory(parts[:-1], name)
    try:
        os.symlink(linkname, parts[-1], dir_fd=parent)
    except FileExistsError:
        raise Refused(f"archive: {name} is both a link and a file or directory") from None
    finally:
        os.close(parent)


# --- Removal ---------------------------------------------------------------------------


def remove_tree(path: str | os.PathLike[str]) -> bool:
    """Remove ``path`` and everything below it, without recursion and without following a
    link; True if it is gone. Entries that cannot be removed are left (and False returned).

    One directory is open at a time: the walk goes down into the first subdirectory it
    finds and back up through ``..`` once a directory is empty, so depth costs neither
    stack frames nor descriptors, and no path grows past PATH_MAX.
    """
    try:
        fd = os.open(path, DIRECTORY_FLAGS)
    except FileNotFoundError:
        return True
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return True
    names: list[str] = []  # the directories entered below ``path``
    stuck: set[tuple[int, int]] = set()  # directories that could not be emptied
    complete = True
    while True:
        below = None
        with os.scandir(fd) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if (entry.inode(), os.fstat(fd).st_dev) in stuck:
                            continue
                        below = os.open(entry.name, DIRECTORY_FLAGS, dir_fd=fd)
                        names.append(entry.name)
                        break
                    os.unlink(entry.name, dir_fd=fd)
                except FileNotFoundError:
                    pass
                except OSError:
                    complete = False
        if below is not None:
            os.close(fd)
            fd = below
            continue
        if not names:
            os.close(fd)
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                return False
            return complete
        info = os.fstat(fd)
        parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        os.close(fd)
        fd = parent
        name = names.pop()
        try:
            os.rmdir(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        except OSError:
            stuck.add((info.st_ino, info.st_dev))
            complete = False


# --- The child process -----------------------------------------------------------------


def limit_self(limits: Limits) -> None:
    """The child's own caps, set before it reads a byte of the archive."""
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    # Past the soft limit SIGXCPU ends it; the hard limit (a second later) is SIGKILL.
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.byte_cap, limits.byte_cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main(argv: list[str]) -> int:
    """The child: ``unpack.py LIMITS-JSON FD``, the archive on stdin; one JSON line out."""
    limits = Limits(**json.loads(argv[1]))
    limit_self(limits)
    result: dict[str, object] = {}
    try:
        unpack(sys.stdin.buffer, int(argv[2]), limits)
    except Refused as exc:
        result["error"] = str(exc)
    except MemoryError:
        result["error"] = limits.no_memory()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["peak_rss_bytes"] = _peak_rss_bytes(usage)
    result["cpu_s"] = usage.ru_utime + usage.ru_stime
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


def _peak_rss_bytes(usage: resource.struct_rusage) -> int:
    """This program's own peak: ru_maxrss survives exec (it would be the forking worker's)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return usage.ru_maxrss * 1024


def as_arguments(limits: Limits) -> str:
    return json.dumps(asdict(limits))


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except MemoryError:
        os._exit(EXIT_NO_MEMORY)
