"""Fetching and dispatch: the worker's one consumer, what it hands to which agent, and the offsets of what
agents finished (the conductor, leases and their offset trackers, pauses, timestamp order within a task)."""
