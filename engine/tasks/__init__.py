"""Tasks, the unit of state: an active task per assigned partition number (its leases, table partitions and
producer), standby tasks, the task manager that turns assignments into tasks, the assignor that makes those
assignments, and records that keep costing their task its partition (poison)."""
