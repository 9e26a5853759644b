"""A FastAPI app's own tests through starlette's TestClient (case.yaml says why)."""

import pytest
from app import app
from fastapi.testclient import TestClient

client = TestClient(app)


@pytest.mark.parametrize("item_id", range(20))
def test_read_item(item_id):
    response = client.get(f"/items/{item_id}", params={"q": "x"})
    assert response.json() == {"item_id": item_id, "q": "x"}


def test_create_item():
    assert client.post("/items", json={"a": 1}).json() == {"created": {"a": 1}}


def test_not_found():
    assert client.get("/nowhere").status_code == 404


def test_websocket_echo():
    with client.websocket_connect("/echo") as one, client.websocket_connect("/echo") as two:
        for i in range(5):
            for ws in (one, two):
                ws.send_text(str(i))
                assert ws.receive_text() == str(i)
        for ws in (one, two):
            ws.send_text("bye")
