"""Words that mark one server log line as an error or a warning, read on its own with no
parser state: the log pane colours ERROR_MARKERS red and WARNING_MARKERS yellow, and a start
that fails quotes the last line with one of FAILURE_MARKERS.

Beside the start-up log parser (collectors.sglang.startup_log), which sorts the errors it
sees finer, by kind; here so that modules which must not name an engine's parser can still
read them.
"""

from __future__ import annotations

# Python's and CUDA's words, and SGLang's for a failed warm-up or health check.
ERROR_MARKERS = ("Traceback", "out of memory", "OutOfMemoryError", "Initialization failed",
                 "Error:", "CUDA error", "Health check failed")
# The Engram host table's warning: its lookups will be much slower.
NO_HUGE_PAGES = "No huge pages"
WARNING_MARKERS = (NO_HUGE_PAGES, "WARNING", "deprecated")
# A failed start's likely cause: an error, or a host table without huge pages.
FAILURE_MARKERS = (*ERROR_MARKERS, NO_HUGE_PAGES)
