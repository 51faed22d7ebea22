"""Alerts: their thresholds and the monitor that raises and clears them."""
