"""GitHub: webhook signatures, and the check run that carries a job's result back.

The REST client is plain urllib on purpose: two endpoints, JSON in and out, and the
base URL comes from LAGTRACE_GITHUB_API_URL (GitHub Enterprise, or a test server).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import urllib.error
import urllib.request
from typing import Any

from services.diagnose.findings import Severity
from services.errors import LagtraceError
from services.models import Job, JobSource, JobStatus
from services.settings import Settings

SIGNATURE_PREFIX = "sha256="
SUMMARY_FINDINGS = 10


class GitHubError(LagtraceError):
    """GitHub's API refused or could not be reached; the notify step is retried later."""


def signature_valid(secret: str, body: bytes, header: str | None) -> bool:
    """X-Hub-Signature-256 over the raw body, compared in constant time."""
    if not header or not header.startswith(SIGNATURE_PREFIX):
        return False
    expected = SIGNATURE_PREFIX + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.encode("utf-8", "replace"))


def sign(secret: str, body: bytes) -> str:
    """The header GitHub would send for ``body`` (used by tests and by `lagtrace` tooling)."""
    return SIGNATURE_PREFIX + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class GitHubClient:
    def __init__(self, settings: Settings, timeout_s: float = 10.0):
        self.base_url = settings.github_api_url.rstrip("/")
        self.token = settings.github_token.get_secret_value() if settings.github_token else None
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        headers = {
            "Accept": "application/vnd.github+json",
            "Content-Type": "application/json",
            "User-Agent": "lagtrace",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(
            self.base_url + path, data=json.dumps(body).encode(), method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise GitHubError(
                f"{method} {path}: HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise GitHubError(f"{method} {path}: {exc}") from None

    def create_check_run(self, repository: str, body: dict[str, Any]) -> int:
        return int(self.request("POST", f"/repos/{repository}/check-runs", body)["id"])

    def update_check_run(self, repository: str, check_run_id: int, body: dict[str, Any]) -> None:
        self.request("PATCH", f"/repos/{repository}/check-runs/{check_run_id}", body)


def dashboard_url(settings: Settings, job: Job) -> str:
    return f"{settings.public_url.rstrip('/')}/jobs/{job.id}"


def conclusion(job: Job, report: dict[str, Any] | None) -> str:
    """Latency findings inform, they do not break the build, unless one is severe."""
    if job.status is JobStatus.cancelled:
        return "cancelled"
    if job.status is JobStatus.failed:
        return "failure"
    findings = report["findings"] if report else []
    if any(f["severity"] == Severity.high for f in findings):
        return "failure"
    return "neutral" if findings else "success"


def check_run_body(settings: Settings, job: Job, source: JobSource, report: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": settings.github_check_name,
        "head_sha": source.github_head_sha,
        "details_url": dashboard_url(settings, job),
        "external_id": str(job.id),
    }
    if job.status in (JobStatus.queued, JobStatus.running):
        return {
            **body,
            "status": "in_progress",
            "output": {
                "title": "Screening CPU configurations",
                "summary": f"Job {job.id}: {', '.join(c.label for c in job.configs)}",
            },
        }
    return {
        **body,
        "status": "completed",
        "conclusion": conclusion(job, report),
        "output": {"title": _title(job, report), "summary": summary(settings, job, report)},
    }


def _title(job: Job, report: dict[str, Any] | None) -> str:
    if job.status is not JobStatus.done:
        return f"lagtrace job {job.id} {job.status.value}"
    count = len(report["findings"]) if report else 0
    return f"{count} latency finding{'s' if count != 1 else ''}" if count else "No latency findings"


def summary(settings: Settings, job: Job, report: dict[str, Any] | None) -> str:
    lines = [f"**lagtrace job [{job.id}]({dashboard_url(settings, job)})**: {job.status.value}", ""]
    if job.error:
        lines += [f"Error: `{job.error[:500]}`", ""]
    if report:
        lines += ["| configuration | runs | median wall |", "|---|---|---|"]
        for config in report["configs"]:
            median = config["wall_s"]["median"] if config["wall_s"] else None
            lines.append(
                f"| `{config['label']}` | {len(config['runs'])} | {f'{median:.3f} s' if median is not None else '-'} |"
            )
        lines.append("")
        for finding in report["findings"][:SUMMARY_FINDINGS]:
            where = f" in `{finding['test']}`" if finding["test"] else ""
            lines.append(f"- **{finding['severity']}** `{finding['kind']}`{where}: {finding['title']}")
        lines += [f"- Note: {note}" for note in report["notes"]]
    return "\n".join(lines)
