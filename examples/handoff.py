"""Two threads hand a token back and forth while a third computes."""
import queue, threading, time, sys

ROUND_TRIPS = int(sys.argv[1]) if len(sys.argv) > 1 else 200

def crunch(stop):
    x = 0
    while not stop.is_set():
        x += 1

def echo(inbox, outbox):
    while True:
        item = inbox.get()
        if item is None:
            return
        outbox.put(item)

def main():
    stop = threading.Event()
    worker = threading.Thread(target=crunch, args=(stop,))
    worker.start()
    ping, pong = queue.Queue(), queue.Queue()
    t = threading.Thread(target=echo, args=(ping, pong)); t.start()
    start = time.perf_counter()
    for i in range(ROUND_TRIPS):
        ping.put(i); pong.get()
    elapsed = time.perf_counter() - start
    ping.put(None); t.join(); stop.set(); worker.join()
    print(f"{ROUND_TRIPS} round trips in {elapsed:.3f} s")

main()
