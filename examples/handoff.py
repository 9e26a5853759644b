"""Latency that depends on core count: threads hand a token back and forth while a
third thread computes (DESIGN.md story 1, reduced).

Pinned to one core, each hand-off is a cheap switch on the same CPU. On two cores the
waiting thread sits on the other CPU and must ask the computing thread for the GIL,
which it yields only after the switch interval (5 ms): every round trip then costs
milliseconds, about 50 times more here.

    python3 examples/handoff.py [ROUND_TRIPS] [CLIENTS]

With several CLIENTS (each with its own echo thread) more threads wait for the GIL at
any instant, as in a server with many connections.
"""

import queue
import sys
import threading
import time


def crunch(stop: threading.Event) -> None:
    count = 0
    while not stop.is_set():
        count += 1


def echo(inbox: queue.Queue, outbox: queue.Queue) -> None:
    while (item := inbox.get()) is not None:
        outbox.put(item)


def client(count: int) -> None:
    ping, pong = queue.Queue(), queue.Queue()
    echoing = threading.Thread(target=echo, args=(ping, pong), name="echo")
    echoing.start()
    try:
        for i in range(count):
            ping.put(i)
            pong.get()
    finally:
        ping.put(None)
        echoing.join()


def round_trips(count: int, clients: int = 1) -> float:
    stop = threading.Event()
    computing = threading.Thread(target=crunch, args=(stop,), name="crunch")
    computing.start()
    try:
        started = time.perf_counter()
        if clients == 1:
            client(count)
        else:
            threads = [threading.Thread(target=client, args=(count,), name=f"client-{i}") for i in range(clients)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        return time.perf_counter() - started
    finally:
        stop.set()
        computing.join()


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    clients = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    print(f"{count} round trips x {clients} client(s) in {round_trips(count, clients):.3f} s")
