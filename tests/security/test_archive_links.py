"""Uploaded archives whose links each look inside the tree on their own, but escape once
unpacked together, and checkouts made where an earlier upload could have planted a link.

The checks run the worker's own checkout code on real archives (plain tar, gzip, and one
packed by the system's tar) on the real filesystem; the last test is the cross-project
attack through the whole service: the API, the job steps and the Docker engine."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select

from services.jobs import sources
from services.models import Job, JobSource
from services.settings import Settings

Member = tuple[tarfile.TarInfo, bytes | None]
STEADY = {"command": ["python3", "-c", "pass"], "configs": ["cpuset=0"], "repeat": 1, "evidence": []}


def pack(members: list[Member], mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:  # type: ignore[call-overload]
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def file(name: str, data: bytes = b"escaped") -> Member:
    return tarfile.TarInfo(name), data


def directory(name: str) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info, None


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def everything_below(top: Path) -> set[str]:
    """Every entry under ``top`` as a relative path, links listed but never followed."""
    found = set()
    for parent, dirs, files in os.walk(top):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(parent, name), top))
    return found


def settings_for(tmp_path: Path) -> Settings:
    return Settings(database_url="sqlite://", work_dir=tmp_path / "work")


def archive_source(job_id: int, archive: bytes) -> JobSource:
    return JobSource(job_id=job_id, kind="archive", archive=archive)


# `p -> .` and `x -> p/p/../..` each resolve inside the tree as text; unpacked, `x` is the
# checkout's grandparent (the work dir's `jobs/`), so anything made below `x` lands there.
CHAIN = [link("p", "."), link("x", "p/p/../..")]
ATTACKS = {
    "chained links, then a file through them": [*CHAIN, file("x/escaped")],
    "chained links, then a link planted through them": [*CHAIN, link("x/planted", ".")],
    "chained links, then a directory through them": [*CHAIN, directory("x/made-outside")],
    "chained links, then a link whose parents are made through them": [*CHAIN, link("x/made/outside", ".")],
    "chained links alone (x itself leads out)": CHAIN,
    "a file, then a link over its directory": [file("d/escaped"), link("d", "p/p/../.."), link("p", ".")],
}


@pytest.mark.parametrize("mode", ["w", "w:gz"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_links_that_escape_only_together_are_refused_and_nothing_lands_outside(tmp_path, attack, mode):
    settings = settings_for(tmp_path)
    (tmp_path / "work" / "jobs").mkdir(parents=True)
    before = everything_below(tmp_path)
    with pytest.raises(sources.SourceError, match=r"archive: .*(link|through)"):
        sources.checkout(archive_source(7, pack(ATTACKS[attack], mode)), settings, "prepare-1")
    # The refused checkout is gone and nothing else appeared: not beside it, not in jobs/.
    assert everything_below(tmp_path) == before


def test_a_real_trees_links_and_hard_links_inside_are_kept(tmp_path):
    tree = tmp_path / "project"
    (tree / "src" / "pkg").mkdir(parents=True)
    (tree / "src" / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (tree / "run.sh").write_text("#!/bin/sh\n")
    (tree / "run.sh").chmod(0o755)
    (tree / "pkg").symlink_to("src/pkg")  # a directory link
    (tree / "docs").mkdir()
    (tree / "docs" / "init.py").symlink_to("../src/pkg/__init__.py")
    (tree / "via").symlink_to("pkg/../run.sh")  # `..` after a link: pkg/.. is src/, not the root
    (tree / "current").symlink_to("pkg")  # a chain: current -> pkg -> src/pkg
    (tree / "broken").symlink_to("src/missing")  # dangling, but inside
    os.link(tree / "run.sh", tree / "run-again.sh")
    packed = subprocess.run(["tar", "-C", str(tree), "-czf", "-", "."], check=True, capture_output=True).stdout

    checkout, _ = sources.checkout(archive_source(1, packed), settings_for(tmp_path), "prepare-1")

    assert os.readlink(checkout / "pkg") == "src/pkg"
    assert os.readlink(checkout / "docs" / "init.py") == "../src/pkg/__init__.py"
    assert (checkout / "current" / "__init__.py").read_text() == "VALUE = 1\n"
    assert os.readlink(checkout / "via") == "pkg/../run.sh" and not (checkout / "via").exists()
    assert os.readlink(checkout / "broken") == "src/missing"
    assert (checkout / "run-again.sh").stat().st_ino == (checkout / "run.sh").stat().st_ino
    assert (checkout / "run.sh").stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize(
    "members",
    [
        [link("h", "/etc/passwd", tarfile.LNKTYPE)],
        [link("h", "../outside", tarfile.LNKTYPE)],
        [link("h", "later", tarfile.LNKTYPE), file("later")],  # only to what is already there
        [link("l", "."), link("h", "l", tarfile.LNKTYPE)],  # not to a link
        [file("f"), link("l", "."), link("h", "l/f", tarfile.LNKTYPE)],  # nor through one
    ],
    ids=["absolute", "dot-dot", "a later member", "a link", "through a link"],
)
def test_hard_links_go_only_to_a_file_unpacked_before_them(tmp_path, members):
    with pytest.raises(sources.SourceError, match="hard link h"):
        sources.checkout(archive_source(1, pack(members)), settings_for(tmp_path), "prepare-1")


def test_two_attempts_of_one_step_get_a_checkout_each(tmp_path):
    # A step re-leased while its first holder still runs: neither deletes the other's code.
    settings = settings_for(tmp_path)
    source = archive_source(3, pack([file("code.py", b"pass\n")]))
    first, _ = sources.checkout(source, settings, "screen-9")
    second, _ = sources.checkout(source, settings, "screen-9")
    assert first != second
    sources.remove(second)
    assert (first / "code.py").read_text() == "pass\n"
    sources.remove(first)
    assert not list((tmp_path / "work" / "jobs").iterdir())


@pytest.mark.parametrize("planted", ["jobs", "jobs/5"])
def test_a_link_planted_where_checkouts_are_made_is_not_followed(tmp_path, planted):
    # What an escaped upload left behind (before this fix): `jobs/` itself, or the next
    # job's directory of the old layout, linked to a place its author can read.
    settings = settings_for(tmp_path)
    readable = tmp_path / "attacker-reads-here"
    readable.mkdir()
    (settings.work_dir / planted).parent.mkdir(parents=True, exist_ok=True)
    (settings.work_dir / planted).symlink_to(readable)

    checkout, _ = sources.checkout(archive_source(5, pack([file("secret.py", b"TOKEN")])), settings, "prepare-1")

    assert checkout.resolve().is_relative_to(settings.work_dir.resolve() / "jobs")
    assert (checkout / "secret.py").read_bytes() == b"TOKEN"
    assert everything_below(readable) == set()
    assert not (settings.work_dir / "jobs").is_symlink()


def test_one_projects_upload_cannot_plant_where_the_next_job_is_unpacked(make_service, tmp_path):
    """The attack through the service (docs/guides/security.md#sources): project A's upload plants, in the work
    dir's jobs/, the directory the next job ids would use, linked to a place A can read;
    project B's next upload must not be unpacked there (nor anything be planted)."""
    service = make_service()
    readable = tmp_path / "attacker-reads-here"
    readable.mkdir()
    with service.session_factory() as session:
        next_id = (session.scalar(select(func.max(Job.id))) or 0) + 1
    # Below `x` (jobs/ once unpacked): `e -> .` is jobs/ again, so `e/e/../..` is the work
    # dir's parent; each target reads as inside the tree from where its link is named.
    plant = [*CHAIN, link("x/e", ".")]
    plant += [link(f"x/{job_id}", f"e/e/../../{readable.name}") for job_id in range(next_id + 1, next_id + 4)]
    # Its own job needs no more than the unpacking: it fails there (no screen step unpacks again).
    attacker = service.upload(pack(plant), {**STEADY, "command": ["./missing.sh"]})
    assert attacker.status_code == 201, attacker.get_json()
    service.wait(attacker.get_json()["id"])

    seen: list[str] = []
    done = threading.Event()

    def read_what_lands_there() -> None:  # the attacker's side: anything B's job puts there
        while not done.is_set():
            for parent, _, names in os.walk(readable):
                seen.extend(Path(parent, name).read_text(errors="replace") for name in names)
            done.wait(0.005)

    reader = threading.Thread(target=read_what_lands_there, daemon=True)
    reader.start()
    try:
        other = service.new_token("other/project")
        victim = service.client.post(
            "/api/v1/jobs",
            data={"job": json.dumps(STEADY), "archive": (io.BytesIO(pack([file("secret.py", b"B-CANARY")])), "b.tgz")},
            content_type="multipart/form-data",
            headers={"Authorization": f"Bearer {other}"},
        )
        assert victim.status_code == 201, victim.get_json()
        job = service.wait(victim.get_json()["id"], token=other)
    finally:
        done.set()
        reader.join()
    assert job["status"] == "done", job["error"]
    assert not any("B-CANARY" in text for text in seen)
    # Nothing of A's archive outside its own (removed) checkouts: no link in the work dir.
    links = [
        path for path in everything_below(service.settings.work_dir) if (service.settings.work_dir / path).is_symlink()
    ]
    assert links == []
