"""A fleet read through Prometheus: its rows, a node's detail and its snapshot."""
