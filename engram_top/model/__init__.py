"""A run's data and how it reads: the store, its facts and views, formatted; no I/O."""
