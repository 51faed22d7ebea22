"""The headless benchmark: its plan, its run, the load sweep and the report."""
