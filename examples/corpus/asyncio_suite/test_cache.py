import asyncio

from cache import SettingsCache


async def worker(results: list, delay: float) -> None:
    await asyncio.sleep(delay)
    results.append(delay)


async def test_refresh_then_lookup(settings_service, offload):
    cache = SettingsCache(settings_service, offload)
    await cache.refresh()
    assert await cache.lookup("region") == "eu"


async def test_lookup_before_refresh(settings_service):
    cache = SettingsCache(settings_service)
    assert await cache.lookup("region") is None


async def test_workers_run_concurrently():
    results: list = []
    await asyncio.gather(*(worker(results, 0.1) for _ in range(20)))
    assert len(results) == 20


async def test_timeouts_fire():
    try:
        await asyncio.wait_for(asyncio.sleep(1), timeout=0.1)
    except TimeoutError:
        return
    raise AssertionError("no timeout")


async def test_queue_hand_off():
    queue: asyncio.Queue = asyncio.Queue()

    async def producer():
        for i in range(10):
            await queue.put(i)
            await asyncio.sleep(0.01)

    task = asyncio.create_task(producer())
    got = [await queue.get() for _ in range(10)]
    await task
    assert got == list(range(10))


async def test_event_wakes_waiters():
    event = asyncio.Event()
    woken: list = []

    async def waiter():
        await event.wait()
        woken.append(True)

    waiters = [asyncio.create_task(waiter()) for _ in range(5)]
    await asyncio.sleep(0.1)
    event.set()
    await asyncio.gather(*waiters)
    assert len(woken) == 5


async def test_semaphore_limits():
    semaphore = asyncio.Semaphore(2)
    running = []
    peak = []

    async def job():
        async with semaphore:
            running.append(1)
            peak.append(len(running))
            await asyncio.sleep(0.05)
            running.pop()

    await asyncio.gather(*(job() for _ in range(6)))
    assert max(peak) == 2


async def test_cancel_is_clean():
    task = asyncio.create_task(asyncio.sleep(1))
    await asyncio.sleep(0.1)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return
    raise AssertionError("not cancelled")


async def test_lock_serialises():
    lock = asyncio.Lock()
    order = []

    async def step(i):
        async with lock:
            order.append(i)
            await asyncio.sleep(0.02)

    await asyncio.gather(*(step(i) for i in range(5)))
    assert sorted(order) == list(range(5))
