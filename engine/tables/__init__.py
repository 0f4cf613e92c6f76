"""Tables: the partition router every kind shares, the kinds, the key layout, a partition's buffers and window
state, recovery from changelogs, and the table manager (the stores on this worker)."""
