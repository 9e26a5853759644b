"""Artifacts of a real run stored in an S3-speaking server (moto_server) and streamed back
by the API: what a Kubernetes install does, where workers and API share no disk."""

from __future__ import annotations

import pytest
import zstandard

from tests.api.conftest import build_api
from tests.api.test_jobs import create
from tests.service_support import make_repository
from tests.support import s3

s3_server = s3.s3_server  # the fixture


@pytest.fixture
def s3_api(database_url, tmp_path, github_server, s3_server):
    bucket = s3_server.new_bucket()
    made = build_api(database_url, tmp_path, github_server.url, **s3_server.settings(bucket))
    made.bucket = bucket
    yield made
    made.dispatcher.stop(timeout=30)
    made.engine.dispose()


def test_a_runs_artifacts_go_to_the_bucket_and_stream_back(s3_api, s3_server, tmp_path):
    url, _ = make_repository(tmp_path / "repo", None)
    job = s3_api.wait(
        create(
            s3_api,
            repository={"url": url},
            command=["python3", "-c", "import time; time.sleep(1)"],
            configs=["cpuset=0"],
            repeat=1,
            evidence=["pyspy"],
        ).get_json()["id"]
    )
    assert job["status"] == "done", job["error"]
    stored = [a for e in job["report"]["evidence"] for a in e["artifacts"] if a.get("key")]
    assert stored, job["report"]["evidence"]
    artifact = stored[0]
    # In the bucket, compressed, and nowhere on the API's disk.
    objects = s3_server.client().list_objects_v2(Bucket=s3_api.bucket)["Contents"]
    assert f"{artifact['key']}.zst" in [o["Key"] for o in objects]
    assert not (tmp_path / "artifacts").exists()
    body = s3_server.client().get_object(Bucket=s3_api.bucket, Key=f"{artifact['key']}.zst")["Body"].read()
    original = zstandard.ZstdDecompressor().stream_reader(body).read()
    assert len(original) == artifact["size"]

    response = s3_api.get(f"/api/v1/artifacts/{artifact['key']}", buffered=False)
    assert response.status_code == 200
    # Streamed from the bucket as the client reads it, not read whole first.
    assert response.is_streamed
    assert response.get_data() == original
    assert artifact["name"] in response.headers["Content-Disposition"]
    other = {"Authorization": f"Bearer {s3_api.new_token('other-team')}"}
    assert s3_api.client.get(f"/api/v1/artifacts/{artifact['key']}", headers=other).status_code == 404

    # Gone from the bucket (retention, a lifecycle rule): the API says so.
    s3_server.client().delete_object(Bucket=s3_api.bucket, Key=f"{artifact['key']}.zst")
    gone = s3_api.get(f"/api/v1/artifacts/{artifact['key']}")
    assert gone.status_code == 404 and "gone" in gone.get_data(as_text=True)
