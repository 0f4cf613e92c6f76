"""Tasks, the unit of state: an active task per assigned partition number (its life, leases, state manager,
inputs in timestamp order and producer), standby tasks and the state kept warm between assignments, where
each partition starts, the task manager that turns assignments into tasks and closes them, and records that
keep costing their task its partition (poison)."""
