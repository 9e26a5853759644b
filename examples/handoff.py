"""Latency that depends on core count: threads hand a token back and forth while a
third thread computes (DESIGN.md story 1, reduced).

Pinned to one core, each hand-off is a cheap switch on the same CPU. On two cores the
waiting thread sits on the other CPU and must ask the computing thread for the GIL,
which it yields only after the switch interval (5 ms): every round trip then costs
milliseconds, about 50 times more here.

    python3 examples/handoff.py [ROUND_TRIPS]
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


def round_trips(count: int) -> float:
    stop = threading.Event()
    computing = threading.Thread(target=crunch, args=(stop,), name="crunch")
    computing.start()
    ping, pong = queue.Queue(), queue.Queue()
    echoing = threading.Thread(target=echo, args=(ping, pong), name="echo")
    echoing.start()
    try:
        started = time.perf_counter()
        for i in range(count):
            ping.put(i)
            pong.get()
        return time.perf_counter() - started
    finally:
        ping.put(None)
        echoing.join()
        stop.set()
        computing.join()


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    print(f"{count} round trips in {round_trips(count):.3f} s")
