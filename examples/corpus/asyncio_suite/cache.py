"""A small async cache of settings, refreshed from a settings service."""

import asyncio
import json
import socket


def fetch_settings(address) -> dict:
    """A synchronous client: connect, ask, wait for the answer."""
    with socket.create_connection(address) as connection:
        connection.sendall(b"GET settings\n")
        return json.loads(connection.makefile("rb").readline())


class SettingsCache:
    def __init__(self, address, offload: bool = False):
        self.address = address
        self.offload = offload
        self.values: dict = {}

    async def refresh(self) -> None:
        if self.offload:
            self.values = await asyncio.to_thread(fetch_settings, self.address)
        else:
            self.values = fetch_settings(self.address)  # blocks the event loop while it waits

    async def lookup(self, key: str):
        await asyncio.sleep(0)
        return self.values.get(key)
