"""What runs on the node: scenario files, the serving engines, the supervisor and the load."""
