"""State: the cluster cache (inventory + usage under one lock) and the threads that keep it in sync."""
