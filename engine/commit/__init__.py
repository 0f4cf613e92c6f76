"""How processed work becomes durable: the checkpoint, the processing guarantee chosen once (at-least-once or
exactly-once) and the tasks' transactions."""
