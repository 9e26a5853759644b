"""Healthy: a client reads 2,000 small protocol messages (about 40 bytes each) that a
server process pushes 2 ms apart (an event stream). Every read is small because every
message is: the reads cost microseconds against the seconds the server takes, so a
bigger buffer would save nothing.

    python3 examples/healthy/protocol_reader.py
"""

import socket
import subprocess
import sys
import time

MESSAGES = 2000

SERVER = """
import asyncio, sys

async def push(reader, writer):
    for i in range({messages}):
        writer.write(f"event {{i:06d}} status=ok value={{i * 7:08d}}\\n".encode())
        await writer.drain()
        await asyncio.sleep(0.002)
    writer.close()
    await writer.wait_closed()
    server.close()

async def main():
    global server
    server = await asyncio.start_server(push, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    try:
        await server.serve_forever()
    except asyncio.CancelledError:
        pass

asyncio.run(main())
"""

if __name__ == "__main__":
    program = SERVER.format(messages=MESSAGES)
    server = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    started = time.perf_counter()
    received = 0
    with socket.create_connection(("127.0.0.1", port)) as ours:
        while chunk := ours.recv(4096):
            received += chunk.count(b"\n")
    server.wait()
    print(f"{received} messages in {time.perf_counter() - started:.3f} s")
