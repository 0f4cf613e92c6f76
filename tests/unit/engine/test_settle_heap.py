"""A worker process settles its heap after start-up: the start-up heap frozen out of the collector's
generations, and the collector's thresholds raised (engine.runtime.GC_THRESHOLDS)."""

from __future__ import annotations

import gc

from engine.runtime import GC_THRESHOLDS, settle_heap


def test_settling_freezes_the_start_up_heap_and_raises_the_thresholds():
    before = gc.get_threshold()
    survivor = [object()]  # alive through the settling: frozen with the rest of the heap
    try:
        settle_heap()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
        assert not any(obj is survivor for obj in gc.get_objects())  # out of every generation
        assert GC_THRESHOLDS[0] > before[0]  # fewer young collections than Python's default
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
