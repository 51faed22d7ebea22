"""A fleet read through Prometheus: its rows, a node's detail and its snapshot.

Its face: what a package above reads of it (the app through nothing else, and of a session
only what app.sessions.FleetView declares). The fleet's comparison is fleet_results of its
rows, over FLEET_METRICS."""

from collectors.prometheus import PromStatus
from engram_top.fleet.detail import HISTORY_S, NodeDetail
from engram_top.fleet.session import METRICS as FLEET_METRICS
from engram_top.fleet.session import UNREAD, FleetRow, FleetSession, NodeState
from engram_top.fleet.session import results as fleet_results
from engram_top.fleet.words import agent_lines, stack_line

__all__ = ["FLEET_METRICS", "HISTORY_S", "UNREAD", "FleetRow", "FleetSession", "NodeDetail",
           "NodeState", "PromStatus", "agent_lines", "fleet_results", "stack_line"]
