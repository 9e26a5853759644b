"""Story 1: three websocket clients through starlette's TestClient, each echoing messages.

starlette 0.37.x (what fastapi 0.111 pins) waits for a client message in a busy
`await anyio.sleep(0)` loop on the portal's event-loop thread, so the test's main thread
and the loop thread fight over the GIL; 0.38 waits on an anyio.Event instead. The same
code is fast pinned to one core and several times slower on two.

    python ws_clients.py [ROUNDS]
"""

import sys
import time

from fastapi import FastAPI, WebSocket
from fastapi.testclient import TestClient

app = FastAPI()


@app.websocket("/echo")
async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    while True:
        text = await websocket.receive_text()
        if text == "bye":
            break
        await websocket.send_text(text)
    await websocket.close()


def main(rounds: int) -> None:
    started = time.perf_counter()
    client = TestClient(app)
    with (
        client.websocket_connect("/echo") as one,
        client.websocket_connect("/echo") as two,
        client.websocket_connect("/echo") as three,
    ):
        for i in range(rounds):
            for ws in (one, two, three):
                ws.send_text(str(i))
                assert ws.receive_text() == str(i)
        for ws in (one, two, three):
            ws.send_text("bye")
    print(f"{rounds} rounds with three clients in {time.perf_counter() - started:.3f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
