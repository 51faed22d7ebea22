"""Alerts: their thresholds and the monitor that raises and clears them.

Its face: what a package above reads of it (the app through nothing else)."""

from engram_top.alerts.monitor import Alert, AlertChange, AlertMonitor, AlertWatch

__all__ = ["Alert", "AlertChange", "AlertMonitor", "AlertWatch"]
