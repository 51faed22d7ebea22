"""Statistics: the compared measures, runs compared with 95% intervals, SLOs and goodput."""
