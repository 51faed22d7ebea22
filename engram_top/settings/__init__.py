"""The user's settings: the config file (thresholds, keys, theme, SLOs) and the state folders.

Its face: what a package above reads of it (the app through nothing else)."""

from engram_top.settings.user_config import UserConfig

__all__ = ["UserConfig"]
