"""`lagtrace submit`: a client of the API. Posts a job, follows it, returns its report."""

from __future__ import annotations

import io
import ipaddress
import json
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.errors import BadInput

if TYPE_CHECKING:
    from services.jobs.report_schema import Report

# Left out of an uploaded directory: history, environments and caches are not the code.
SKIP_DIRS = {
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    "node_modules",
    ".state",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def check_url(url: str) -> None:
    """Refuse a --url the token would cross the network unencrypted to: http:// is for
    this machine only (localhost, *.localhost, a loopback address), anything else is
    https:// (tests/cli/test_submit_token.py)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname and _is_local(parts.hostname):
        return
    if parts.scheme == "http":
        raise BadInput(f"--url {url}: the API token would be sent unencrypted to {parts.hostname}; use https://")
    raise BadInput(f"--url {url!r}: use https:// (http:// only to this machine)")


def _is_local(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.hostname, parts.port or {"http": 80, "https": 443}.get(parts.scheme)


class _SameOriginToken(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but keep the token to the origin it was given for: urllib copies
    every header (Authorization too) to the redirected request, wherever it points
    (tests/cli/test_submit_token.py)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(new.full_url) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


class ApiClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        timeout_s: float = 30.0,
        connect_wait_s: float = 30.0,
        progress: Callable[[str], None] = lambda message: None,
    ):
        check_url(base_url)
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        # A server that refuses connections may still be starting (`lagtrace serve &` just
        # before `submit` in a script): a refused connection sent nothing, so it is retried.
        self.connect_wait_s = connect_wait_s
        self.progress = progress
        self._opener = urllib.request.build_opener(_SameOriginToken)

    def request(
        self, method: str, path: str, body: bytes | None = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.base_url + path, data=body, method=method, headers=headers)
        deadline = time.monotonic() + self.connect_wait_s
        waited = False
        while True:
            try:
                with self._opener.open(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                raise ApiError(exc.code, _error_message(exc)) from None
            except (urllib.error.URLError, OSError) as exc:
                refused = isinstance(getattr(exc, "reason", exc), ConnectionRefusedError)
                if refused and time.monotonic() < deadline:
                    if not waited:
                        self.progress(f"waiting up to {self.connect_wait_s:g} s for {self.base_url} to answer")
                        waited = True
                    time.sleep(0.5)
                    continue
                raise ApiError(0, f"cannot reach {self.base_url}: {exc}") from None

    def page_url(self, job_id: int) -> str:
        """The dashboard's page of a job, on the server this client talks to."""
        return f"{self.base_url}/jobs/{job_id}"

    def post_json(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, json.dumps(payload).encode())

    def post_archive(self, path: str, job: dict[str, Any], archive: bytes) -> dict[str, Any]:
        boundary = uuid.uuid4().hex
        parts = [
            f'--{boundary}\r\nContent-Disposition: form-data; name="job"\r\n'
            f"Content-Type: application/json\r\n\r\n{json.dumps(job)}\r\n".encode(),
            f'--{boundary}\r\nContent-Disposition: form-data; name="archive"; filename="code.tar.gz"\r\n'
            f"Content-Type: application/gzip\r\n\r\n".encode()
            + archive
            + b"\r\n",
            f"--{boundary}--\r\n".encode(),
        ]
        return self.request("POST", path, b"".join(parts), f"multipart/form-data; boundary={boundary}")


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read())
    except ValueError:
        return f"HTTP {exc.code} {exc.reason}"
    return body.get("error") or str(body) if isinstance(body, dict) else str(body)


def pack_directory(directory: Path) -> bytes:
    def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if Path(member.name).name in SKIP_DIRS else member

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for entry in sorted(directory.iterdir()):
            archive.add(entry, arcname=entry.name, filter=keep)
    return buffer.getvalue()


def submit_and_wait(
    client: ApiClient,
    spec: dict[str, Any],
    *,
    repository: dict[str, Any] | None,
    directory: Path | None,
    wait: bool,
    poll_s: float,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    if repository is not None:
        job = client.post_json("/api/v1/jobs", {**spec, "repository": repository})
    elif directory is None:
        raise ValueError("submit: give a repository or a directory to upload")
    else:
        if directory is None:
            raise ValueError("submit needs a repository URL or a directory to upload")
        archive = pack_directory(directory)
        progress(f"uploading {directory} ({len(archive) // 1024} KiB)")
        job = client.post_archive("/api/v1/jobs", spec, archive)
    # The dashboard is served with the API (`lagtrace serve`): its page of the job is here.
    progress(f"job {job['id']} queued: {client.page_url(job['id'])}" + _warning(job))
    last = None
    while wait and job["report"] is None:
        time.sleep(poll_s)
        job = client.request("GET", f"/api/v1/jobs/{job['id']}")
        state = job["progress"]
        line = f"job {job['id']}: {state['phase']}, {state['runs_done']}/{state['runs_planned']} runs" + _warning(job)
        if line != last:
            progress(line)
            last = line
    return job


def _warning(job: dict[str, Any]) -> str:
    """A lost worker, or none alive to take the job, as the server sees it."""
    warning = (job.get("progress") or {}).get("warning")
    return f" ({warning})" if warning else ""


def exit_status(job: dict[str, Any], report: Report) -> tuple[int, str | None]:
    """`submit`'s exit status for a job it followed to its end, and a line for stderr.

    As for `lagtrace run` (docs/reference/cli.md): 0 when the job is done and its report
    produced, whatever the command did; a test that failed, or a command that failed in
    every run, is the report's command_failed finding, not lagtrace failing, and is named
    on stderr too. 1 when the job itself failed or was cancelled."""
    if job["status"] != "done":
        return 1, f"lagtrace: job {job['id']} {job['status']}: {job['error']}"
    for finding in report.findings:
        if finding.kind == "command_failed":
            tail = finding.metrics.get("output_tail") or ""
            last = tail.strip().splitlines()[-1:] if tail.strip() else []
            return 0, f"lagtrace: job {job['id']}: {finding.title}" + (f"; last output: {last[0]}" if last else "")
    return 0, None
