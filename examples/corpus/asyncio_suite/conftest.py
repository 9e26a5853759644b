import socket
import threading

import pytest


def pytest_addoption(parser):
    parser.addoption("--offload", action="store_true", help="run the settings client in a thread")


@pytest.fixture
def offload(request):
    return request.config.getoption("--offload")


@pytest.fixture(scope="session")
def settings_service():
    """A settings service that answers each request after 0.22 s (a slow peer)."""
    listener = socket.create_server(("127.0.0.1", 0))
    pause = threading.Event()

    def serve():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                connection.recv(64)
                pause.wait(0.22)
                connection.sendall(b'{"ttl": 30, "region": "eu"}\n')

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()
    listener.close()
