"""Monitors: an agent inside one event too long (the watchdog, on the loop), and an event loop that stopped
turning (the loop monitor, from a thread)."""
