"""Fetching and dispatch: the worker's one consumer, decoding each batch once, and handing it to the task
that owns its partition (engine.tasks), which releases it to the agent instances."""
