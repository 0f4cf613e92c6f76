"""What the app reads, writes and keeps: the declaration run of its agents (`declaration`), and the topology
built from it (`plan`): every topic with its partitions and config, checked against the broker at start."""
