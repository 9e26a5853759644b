"""The ledger's worker name says where a configuration was measured: pod (host), process,
and on Kubernetes the node and its CPU model."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from services.jobs.ledger import cpu_model, worker_name
from services.settings import Settings


def test_outside_kubernetes_it_is_host_and_process():
    name = worker_name(Settings(node_name=None))
    assert name.startswith(f"{socket.gethostname()}/{os.getpid()}")
    assert " on " not in name


def test_in_a_pod_it_names_the_node_and_its_cpu_model():
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
    name = worker_name(Settings(node_name="node-a"))
    assert name.startswith(f"{socket.gethostname()}/{os.getpid()} on node-a")
    assert cpu_model() == (" ".join(model.split()) if model else None)
    if model:
        assert name.endswith(f"({' '.join(model.split())})")
    assert len(worker_name(Settings(node_name="n" * 500))) == 200  # the ledger column's width
