"""Turnaround of the CI service: from a GitHub push delivery sent to `lagtrace serve` to
the job's first container started, and to its report stored. The whole stack runs as
separate processes, as in production on one node: PostgreSQL, Redis, two `lagtrace
worker`s (one with the beat), `lagtrace serve`, a local GitHub for the check runs, the
docker executor, the code cloned from a git repository. Deliveries come two at a time
(both workers busy), the next pair once both reports are stored. Container starts are
read from `docker events` (the engine's own clock), the report's from the job's
`finished_at`. Target: first container within 1 s of the delivery, at the median.

    .venv/bin/python -m tests.bench.run --only turnaround [--quick]
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from services.measure.executors.docker_guards import JOB_LABEL
from tests.bench.common import BenchError, redis_server_url, scratch_dir, server_url
from tests.bench.figures import quantile_figure
from tests.e2e.test_service import running_stack
from tests.service_support import make_repository, push_payload

# A small job: one configuration, a few docker runs of a program that mostly waits, no drill.
LAGTRACE_YML = "command: python3 steady.py\nconfigs: [cpuset=0]\nrepeat: 3\nevidence: []\nexecutor: docker\n"


class ContainerStarts:
    """`docker events` in the background: when each job's first container was created and
    when it started (the engine's clock)."""

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.created: dict[int, float] = {}
        self._process = subprocess.Popen(
            [
                "docker",
                "events",
                "--filter",
                "type=container",
                "--filter",
                "event=create",
                "--filter",
                "event=start",
                "--filter",
                f"label={JOB_LABEL}",
                "--format",
                "{{json .}}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            event = json.loads(line)
            job = event.get("Actor", {}).get("Attributes", {}).get(JOB_LABEL, "")
            if job.isdigit():
                seen = self.first if event.get("Action", event.get("status")) == "start" else self.created
                seen.setdefault(int(job), event["timeNano"] / 1e9)

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)


def _moment(text: str) -> float:
    moment = dt.datetime.fromisoformat(text)
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()


def _deliver(stack, payload: dict) -> tuple[int, float]:
    # Each real push carries its own time: the same signed body under a new delivery id
    # would be refused as a replay.
    payload = {**payload, "repository": {**payload["repository"], "pushed_at": time.time_ns()}}
    sent = time.time()
    status, answer = stack.deliver(payload, f"bench-{uuid.uuid4()}")
    if status != 202 or answer.get("job_id") is None:
        raise BenchError(f"the push delivery was answered {status}: {answer}")
    return answer["job_id"], sent


def run(quick: bool = False) -> dict:
    pairs = 1 if quick else 6
    to_container: list[float] = []
    to_report: list[float] = []
    earlier: list[float] = []
    later: list[float] = []
    # Where the earlier job of each pair spends its time until its first container starts.
    phases: dict[str, list[float]] = {name: [] for name in PHASES}
    with scratch_dir("turnaround") as base:
        url, head = make_repository(base / "repo", LAGTRACE_YML)
        payload = push_payload(url, head)
        events = ContainerStarts()
        try:
            with running_stack(server_url(), redis_server_url(), Path(base / "stack"), workers=2) as stack:
                stack.register(url)  # deliveries start jobs only for a registered repository
                # One job first, unmeasured: the workers' first task imports and connects
                # lazily (not in the quick run: a smoke run, not a figure).
                if not quick:
                    job_id, _ = _deliver(stack, payload)
                    stack.wait(job_id, timeout_s=300)
                for _ in range(pairs):
                    with ThreadPoolExecutor(2) as pool:
                        sent = list(pool.map(lambda _: _deliver(stack, payload), range(2)))
                    jobs = {}
                    for job_id, sent_at in sent:
                        job = stack.wait(job_id, timeout_s=300)
                        if job["status"] != "done":
                            raise BenchError(f"job {job_id} {job['status']}: {job['error']}")
                        jobs[job_id] = job
                        to_report.append(_moment(job["finished_at"]) - sent_at)
                    time.sleep(0.5)  # the docker events stream lags the engine a little
                    waits = {}
                    for job_id, sent_at in sent:
                        if job_id not in events.first or job_id not in events.created:
                            raise BenchError(f"no container create/start seen for job {job_id}")
                        waits[job_id] = events.first[job_id] - sent_at
                    to_container.extend(waits.values())
                    # A node runs one measured run at a time: the later job of a pair waits
                    # for the earlier one's runs, whichever worker took it.
                    first_id, first_sent = min(sent, key=lambda pair: waits[pair[0]])
                    earlier.append(waits[first_id])
                    later.append(max(waits.values()))
                    job = jobs[first_id]
                    stored, prepared = _moment(job["created_at"]), _moment(job["started_at"])
                    created, started = events.created[first_id], events.first[first_id]
                    for name, value in zip(
                        PHASES,
                        (stored - first_sent, prepared - stored, created - prepared, started - created),
                        strict=True,
                    ):
                        phases[name].append(value)
        finally:
            events.stop()
    note = f"{pairs} pairs of deliveries, 2 workers"
    return {
        "figures": [
            quantile_figure("webhook to first container, median", to_container, 50, below=1.0, note=note),
            quantile_figure("webhook to first container, p95", to_container, 95),
            quantile_figure("first container, earlier job of a pair, median", earlier, 50, below=1.0),
            quantile_figure(
                "first container, later job of a pair, median",
                later,
                50,
                note="waits for the earlier job's runs: one measured run per node",
            ),
            *(quantile_figure(f"earlier job: {name}, median", values, 50) for name, values in phases.items()),
            quantile_figure("webhook to report stored, median", to_report, 50),
            quantile_figure("webhook to report stored, p95", to_report, 95),
        ],
        "to_container_s": to_container,
        "to_report_s": to_report,
        "earlier_s": earlier,
        "later_s": later,
        "earlier_phases_s": phases,
    }


# The earlier job's way to its first container, from the job's timestamps (API) and the
# engine's events: the delivery stored; prepared (Celery message, clone, .lagtrace.yml,
# plan: job.started_at); the first container created (Celery message, clone again, the
# node's lock, the executor's checks); and the container started.
PHASES = ("delivery to job stored", "stored to prepared", "prepared to container created", "container create to start")
