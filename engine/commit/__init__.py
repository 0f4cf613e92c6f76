"""How processed work becomes durable: the checkpoint, the processing guarantee chosen once (at-least-once or
exactly-once), the tasks' transactions and the quiesce gate that pauses agents between events."""
