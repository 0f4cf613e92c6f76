"""Agents at run time: their instances under a supervisor (the runner) and the replies to `ask`."""
