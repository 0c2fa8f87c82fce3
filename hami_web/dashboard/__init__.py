"""The read-only web dashboard: the cluster's GPUs, pending pods, recent decisions and what-if planning."""
