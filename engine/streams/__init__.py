"""What agents iterate: streams and their operators (`stream.py`), the event being processed now
(`current.py`, read by tables, sends and asks), and the gate that pauses agents between events for an
exactly-once checkpoint (`quiesce.py`)."""
