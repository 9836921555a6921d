"""`bridge controller`: sets each node's split target from pending GPU demand (GPUs follow the workloads)."""
