"""A plugin registry that probes every plugin when it is imported (the mistake)."""

import time

PLUGINS = [f"plugin_{i}" for i in range(12)]


def _probe(name: str) -> bool:
    time.sleep(0.1)  # asks the plugin's service whether it is up
    return True


AVAILABLE = [name for name in PLUGINS if _probe(name)]
