"""An evidence entry stored: its files in the artifact store, its content with the paths
that name the checkout made relative to it (the drill's, the survey's census, a
regression's profiles)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from services.evidence import dump
from services.measure.artifacts import ArtifactStore, ArtifactTooLarge
from services.measure.executors.base import Executor
from services.measure.probes import EvidenceDraft
from services.models import Evidence, Job, JobConfig, Run


def store_evidence(
    session: Session,
    job: Job,
    job_config: JobConfig,
    test_id: str | None,
    run: Run | None,
    draft: EvidenceDraft,
    store: ArtifactStore,
    executor: Executor,
) -> Evidence:
    artifacts = []
    for file in draft.files:
        key = f"job-{job.id}/run-{run.id if run else 'none'}/{file.name}"
        try:
            artifacts.append(store.put(key, file.path, file.media_type).as_dict())
        except (ArtifactTooLarge, OSError) as exc:
            artifacts.append({"name": file.name, "media_type": file.media_type, "stored": False, "reason": str(exc)})
    evidence = Evidence(
        # The configuration's own job: ``job`` may be the job as a shard or a gate's matrix
        # narrowed it (services/jobs/shards.py), which the session cannot store.
        job=job_config.job,
        config=job_config,
        run=run,
        test_id=test_id,
        kind=draft.kind,
        # Frames' files, traced paths: the checkout's as repository paths, not as the
        # command saw them (/workspace/... in a container).
        content=repository_paths(dump(draft.content), executor.repository_paths),
        text=executor.repository_paths(draft.text) if draft.text is not None else None,
        artifacts=artifacts,
    )
    session.add(evidence)
    session.flush()
    return evidence


def repository_paths(value: Any, translate: Callable[[str], str]) -> Any:
    """Every string in the evidence content translated (keys stay: they are field names)."""
    if isinstance(value, str):
        return translate(value)
    if isinstance(value, dict):
        return {key: repository_paths(item, translate) for key, item in value.items()}
    if isinstance(value, list):
        return [repository_paths(item, translate) for item in value]
    return value
