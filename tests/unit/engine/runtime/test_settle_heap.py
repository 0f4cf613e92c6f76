"""A worker process settles its heap after start-up: the start-up heap frozen out of the collector's
generations (engine.runtime.settle_heap)."""

from __future__ import annotations

import gc

from engine.runtime import settle_heap


def test_settling_freezes_the_start_up_heap():
    survivor = [object()]  # alive through the settling: frozen with the rest of the heap
    try:
        settle_heap()
        assert not any(obj is survivor for obj in gc.get_objects())  # out of every generation
    finally:
        gc.unfreeze()
    assert any(obj is survivor for obj in gc.get_objects())
