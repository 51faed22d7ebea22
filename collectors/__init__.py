"""Readers of the node (GPUs, host memory, servers, Prometheus) into typed readings."""
