"""The user's settings: the config file (thresholds, keys, theme, SLOs) and the state folders."""
