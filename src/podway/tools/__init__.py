"""Tools beside the load balancer: the echo workload and the migration helpers."""
