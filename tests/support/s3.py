"""A local S3-speaking server for the artifact store's tests: moto's server mode, a real
HTTP server in its own process (installed with the test extras, `moto[server]`)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require

KEY_ID = "lagtrace-test-key"
SECRET_KEY = "lagtrace-test-secret"


@dataclass
class S3Server:
    url: str
    process: subprocess.Popen

    def settings(self, bucket: str) -> dict:
        """The LAGTRACE_ARTIFACTS_S3_* settings for a bucket on this server."""
        return {
            "artifacts_s3_bucket": bucket,
            "artifacts_s3_endpoint_url": self.url,
            "artifacts_s3_region": "us-east-1",
            "artifacts_s3_access_key_id": KEY_ID,
            "artifacts_s3_secret_access_key": SECRET_KEY,
        }

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=KEY_ID,
            aws_secret_access_key=SECRET_KEY,
        )

    def new_bucket(self) -> str:
        name = f"lagtrace-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server():
    program = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    require(program is not None, "moto_server is not installed (pip install -e '.[test]')")
    port = _free_port()
    process = subprocess.Popen(
        [program, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    server = S3Server(f"http://127.0.0.1:{port}", process)
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("moto_server did not start") from None
            time.sleep(0.1)
    yield server
    process.terminate()
    process.wait(timeout=10)
