"""Agents at run time: their instances under a supervisor (the runner), the streams they iterate and the
operators on them, and the replies to `ask`."""
