"""The host lab: KECE on real Linux network namespaces, under partitions, pauses and failover
(see bench/README.md)."""
