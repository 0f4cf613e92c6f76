"""The ground truth of the counting apps (tests/integration/rebalance_apps.py): every count and every
window's final value against what the input says."""

from __future__ import annotations

from collections import Counter

from tests.integration.rebalance_run import (
    truth_of,
)


def check(events, counts: dict[str, int], closes: list[tuple[str, int, int]], *, exact: bool) -> None:
    """Exactly-once: every count and every window exact, each window closed once. At-least-once: nothing
    below the truth, no window missing."""
    truth_counts, truth_windows = truth_of(events)
    windows = Counter((key, start) for key, start, _ in closes)
    values = {(key, start): value for key, start, value in closes}
    assert set(truth_windows) - set(values) == set(), "windows never closed"
    if exact:
        assert {k: n for k, n in counts.items() if counts[k] != truth_counts.get(k)} == {}
        assert [w for w, n in windows.items() if n > 1] == [], "windows closed more than once"
        assert {w: values[w] for w in truth_windows if values[w] != truth_windows[w]} == {}
    else:
        assert [k for k, n in truth_counts.items() if counts.get(k, 0) < n] == []
        assert [w for w, n in truth_windows.items() if values[w] < n] == []
