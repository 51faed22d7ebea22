"""The live session: sources, poll loops, the store, alerts and the supervisor together."""
