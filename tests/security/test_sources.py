"""Sources: archives that climb out of their directory or explode, clones that reach the
server's own disk or smuggle git options, and a .lagtrace.yml that links to a host file."""

from __future__ import annotations

import gzip
import io
import subprocess
import tarfile
import time

import pytest

from services.errors import BadInput
from services.jobs import sources
from services.models import Job, JobSource
from tests.service_support import make_repository, push_payload, register

STEADY = {"command": ["python3", "-c", "pass"], "configs": ["cpuset=0"], "repeat": 1, "evidence": []}


def tarball(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def file_member(name: str, data: bytes = b"evil") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def link_member(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def test_archive_path_traversal_is_refused_by_the_worker(service, tmp_path):
    outside = tmp_path / "work" / "outside.txt"
    attacks = {
        "dot-dot": [file_member("../../outside.txt")],
        "absolute": [file_member(str(outside))],
        # A link inside the tree, then a file written "through" it.
        "through-a-link": [link_member("escape", str(tmp_path / "work")), file_member("escape/outside.txt")],
        "relative-link-out": [link_member("up", "../../.."), file_member("up/outside.txt")],
        "hard-link": [link_member("shadow", "/etc/shadow", tarfile.LNKTYPE)],
    }
    for name, members in attacks.items():
        response = service.upload(tarball(members), STEADY)
        assert response.status_code == 201, (name, response.get_json())
        job = service.wait(response.get_json()["id"])
        assert job["status"] == "failed" and "archive" in job["error"], (name, job["error"])
    assert not outside.exists()
    assert not list((tmp_path / "work").rglob("outside.txt"))


def gzip_bomb(unpacked_bytes: int) -> bytes:
    """A tarball of one file of zeros, gzip-compressed in chunks (never all in memory)."""
    info = tarfile.TarInfo("zeros.bin")
    info.size = unpacked_bytes
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as packer:
        packer.write(info.tobuf(format=tarfile.GNU_FORMAT))
        chunk = b"\0" * (1 << 20)
        for _ in range(unpacked_bytes >> 20):
            packer.write(chunk)
        packer.write(b"\0" * 1024)  # end-of-archive blocks
    return out.getvalue()


# Asserts the request's latency against a small archive's: serially, beside no other work.
@pytest.mark.latency
def test_a_decompression_bomb_is_cut_off_early_and_off_the_request_thread(service):
    # The same archive unpacking to 1 MiB: its request, after one that pays the app's
    # first-call costs, is what the bomb's must match (0.5 s was a bound once: one quiet
    # run answered in 512 ms, the next machine may be slower or faster).
    small = gzip_bomb(1024 * 1024)
    service.wait(service.upload(small, STEADY).get_json()["id"])
    started = time.perf_counter()
    response = service.upload(small, STEADY)
    small_s = time.perf_counter() - started
    service.wait(response.get_json()["id"])
    packed = gzip_bomb(1024 * 1024 * 1024)  # 1 GiB of zeros: about 1 MB packed
    started = time.perf_counter()
    response = service.upload(packed, STEADY)
    answered_s = time.perf_counter() - started
    assert response.status_code == 201, response.get_json()
    job = service.wait(response.get_json()["id"])
    assert job["status"] == "failed" and "unpacks to more than" in job["error"], job["error"]
    print(
        f"bomb: {len(packed)} bytes packed, request answered in {answered_s * 1000:.0f} ms "
        f"(1 MiB archive: {small_s * 1000:.0f} ms); {job['error']}"
    )
    # The request only looked at the first bytes: a thousand times the unpacked size costs
    # it no more than a few times a small archive's (writing 1 GiB out takes seconds).
    assert answered_s < 3 * small_s + 0.25, (answered_s, small_s)
    # Refused from the header's size, before a byte of it was written.
    assert not list((service.settings.work_dir / "jobs").rglob("zeros.bin"))


def test_a_pax_header_bomb_fails_the_job_naming_the_setting(service):
    from tests.security.test_archive_bounds import pax_header_bomb

    packed = gzip.compress(pax_header_bomb(), 9)  # 64 MiB of header in 65 KB
    job = service.wait(service.upload(packed, STEADY).get_json()["id"])
    assert job["status"] == "failed", job
    assert "PAX header" in job["error"] and "LAGTRACE_MAX_ARCHIVE_HEADER_BYTES" in job["error"], job["error"]
    assert list((service.settings.work_dir / "jobs").iterdir()) == []


def test_too_many_members_are_refused(make_service):
    service = make_service(max_archive_members=50)
    members = [file_member(f"f{i}.txt", b"x") for i in range(60)]
    job = service.wait(service.upload(tarball(members), STEADY).get_json()["id"])
    assert job["status"] == "failed" and "more than 50 members" in job["error"]


def test_a_file_url_is_refused_where_local_repositories_are_off(make_service, tmp_path):
    service = make_service(allow_file_repositories=False)
    for url in ("file:///etc", "/etc", "ext::sh -c touch% /tmp/x", "ssh://git@example.com/r.git", "git@example.com:r"):
        response = service.submit({**STEADY, "repository": {"url": url}})
        assert response.status_code == 422, (url, response.get_json())
    assert service.count(Job) == 0


@pytest.mark.parametrize(
    "url",
    ["--upload-pack=touch {marker}", "-u touch {marker}", "ext::sh -c touch% {marker}", "https://x@-oProxyCommand=x/"],
)
def test_option_injection_in_a_clone_url_is_refused_and_runs_nothing(service, tmp_path, url):
    marker = tmp_path / "pwned"
    response = service.submit({**STEADY, "repository": {"url": url.format(marker=marker)}})
    assert response.status_code == 422, response.get_json()
    # And had it been stored (an older row, a bypassed check), the worker refuses it too.
    directory = tmp_path / "clone"
    directory.mkdir()
    source = JobSource(job_id=1, kind="git", repository_url=url.format(marker=marker), ref=None)
    with pytest.raises((BadInput, sources.SourceError)):
        sources._clone(source, service.settings, directory)
    assert not marker.exists()


def test_git_ignores_the_workers_own_git_config_and_credentials(service, tmp_path, monkeypatch):
    # The worker's ~/.gitconfig rewrites URLs and names a credential helper; a clone for a
    # job must use neither (nor the worker's SSH keys: ssh is not an allowed protocol).
    url, _ = make_repository(tmp_path / "repo", None)
    home = tmp_path / "worker-home"
    home.mkdir()
    marker = tmp_path / "helper-ran"
    (home / ".gitconfig").write_text(
        f'[credential]\n\thelper = "!touch {marker}; echo"\n[url "file:///nonexistent/"]\n\tinsteadOf = {url}\n'
    )
    monkeypatch.setenv("HOME", str(home))
    assert subprocess.run(["git", "config", "--global", "credential.helper"], capture_output=True).returncode == 0
    job = service.wait(service.submit({**STEADY, "repository": {"url": url}}).get_json()["id"])
    assert job["status"] == "done", job["error"]  # the insteadOf rewrite would have broken it
    assert not marker.exists()


def test_a_lagtrace_yml_linked_to_a_host_file_is_not_read(service, tmp_path):
    host_file = tmp_path / "host-config.yml"
    host_file.write_text("HOST-CANARY-a94c: 1\n")
    url, head = make_repository(tmp_path / "repo", None)
    repo = tmp_path / "repo"
    (repo / ".lagtrace.yml").symlink_to(host_file)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo)]
    subprocess.run([*git, "add", ".lagtrace.yml"], check=True)
    subprocess.run([*git, "commit", "-qm", "config as a link"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    register(service.settings, service.session_factory, url)
    job = service.wait(service.deliver(push_payload(url, head), "d-link").get_json()["job_id"])
    assert job["status"] == "failed" and ".lagtrace.yml" in job["error"], job["error"]
    assert "HOST-CANARY" not in job["error"]


def test_requirements_linked_out_of_the_tree_are_not_read(tmp_path):
    from services.measure.install import inside_tree, read_regular_file

    tree = tmp_path / "tree"
    (tree / "requirements").mkdir(parents=True)
    (tree / "requirements.txt").symlink_to("/etc/passwd")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "dev.txt").write_text("x\n")
    (tree / "requirements" / "dev.txt").symlink_to(tmp_path / "elsewhere" / "dev.txt")
    (tree / "constraints.txt").write_text("pytest<9\n")
    found = [p.name for p in sorted(tree.rglob("*.txt")) if inside_tree(p, tree)]
    assert found == ["constraints.txt"]
    with pytest.raises(BadInput, match="links are not followed"):
        read_regular_file(tree / "requirements.txt", 1024)


@pytest.mark.parametrize("address", ["127.0.0.1", "169.254.169.254", "10.0.0.1", "[::1]"])
def test_repository_urls_at_internal_addresses_are_refused(make_service, tmp_path, address):
    url = f"https://{address}/r.git"
    # The shipped default: GitHub's host only, so an address is not even a host allowed.
    service = make_service(run_jobs=False, repository_hosts=None, github_api_url="https://api.github.com")
    response = service.submit({**STEADY, "repository": {"url": url}})
    assert response.status_code == 422, response.get_json()
    assert "LAGTRACE_REPOSITORY_HOSTS" in response.get_json()["error"]
    assert service.count(Job) == 0
    # Where any host is allowed, the address itself is refused: not global.
    service.settings.repository_hosts = ["*"]
    response = service.submit({**STEADY, "repository": {"url": url}})
    assert response.status_code == 422, response.get_json()
    assert "LAGTRACE_REPOSITORY_ALLOWED_NETWORKS" in response.get_json()["error"]
    # And the worker refuses it before git runs (a row stored before the check existed).
    (tmp_path / "clone").mkdir()
    source = JobSource(job_id=1, kind="git", repository_url=url, ref=None)
    with pytest.raises((BadInput, sources.SourceError), match="LAGTRACE_REPOSITORY_ALLOWED_NETWORKS"):
        sources._clone(source, service.settings, tmp_path / "clone")
    assert not (tmp_path / "clone" / ".git" / "FETCH_HEAD").exists()


def test_only_the_allowed_hosts_are_cloned_from(front_door):
    front_door.settings.repository_hosts = None
    front_door.settings.github_api_url = "https://api.github.com"
    assert front_door.settings.repository_host_list == ["github.com"]
    refused = front_door.submit({**STEADY, "repository": {"url": "https://gitlab.com/o/r.git"}})
    assert refused.status_code == 422 and "LAGTRACE_REPOSITORY_HOSTS" in refused.get_json()["error"]
    accepted = front_door.submit({**STEADY, "repository": {"url": "https://github.com/o/r.git"}})
    assert accepted.status_code == 201, accepted.get_json()
    # A GitHub Enterprise named by the API URL is allowed beside github.com.
    front_door.settings.github_api_url = "https://ghe.corp.example/api/v3"
    assert front_door.settings.repository_host_list == ["github.com", "ghe.corp.example"]


def test_a_name_that_resolves_to_loopback_is_refused_unless_its_network_is_allowed(make_service, tmp_path):
    service = make_service(run_jobs=False)  # any host ("*"), no network allowed
    url = "https://localhost/r.git"  # the name passes; its address does not
    assert service.submit({**STEADY, "repository": {"url": url}}).status_code == 201
    with pytest.raises(sources.SourceError, match=r"resolves to a loopback address .*ALLOWED_NETWORKS"):
        sources.resolve_repository_host(url, service.settings)
    service.settings.repository_allowed_networks = ["127.0.0.0/8", "::1/128"]
    host, port, addresses = sources.resolve_repository_host(url, service.settings)
    assert (host, port) == ("localhost", 443) and "127.0.0.1" in addresses
