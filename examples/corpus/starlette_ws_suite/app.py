"""The app under test: two HTTP routes and a websocket echo."""

from fastapi import FastAPI, WebSocket

app = FastAPI()


@app.get("/items/{item_id}")
def read_item(item_id: int, q: str | None = None) -> dict:
    return {"item_id": item_id, "q": q}


@app.post("/items")
def create_item(item: dict) -> dict:
    return {"created": item}


@app.websocket("/echo")
async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    while True:
        text = await websocket.receive_text()
        if text == "bye":
            break
        await websocket.send_text(text)
    await websocket.close()
