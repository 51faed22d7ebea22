"""collectors.base: a poll in a thread must stop when its loop is cancelled."""

import asyncio
import random

from collectors.base import run_blocking


async def test_a_cancelled_poll_loop_always_stops() -> None:
    # asyncio.wait_for on Python 3.11 can swallow a cancellation that lands as the thread
    # finishes; a poll loop would then never stop, and quitting the app would hang.
    rng = random.Random(7)

    async def poll_forever() -> None:
        while True:
            await run_blocking(lambda: None, 1.0)

    for _ in range(300):
        task = asyncio.create_task(poll_forever())
        await asyncio.sleep(rng.random() * 0.002)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2)
        assert done, "the loop went on after its cancellation"
        assert task.cancelled()


async def test_timeout_raises_and_the_result_is_dropped() -> None:
    import time
    try:
        await run_blocking(lambda: time.sleep(0.3), 0.05)
    except TimeoutError as exc:
        assert "0.05" in str(exc)
    else:
        raise AssertionError("no timeout")
