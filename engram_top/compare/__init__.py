"""Statistics: the compared measures, runs compared with 95% intervals, SLOs and goodput.

Its face: what a package above reads of it (the app through nothing else). A session's runs
compared is compare_runs (runs.comparison) and a comparison's verdict verdict_of
(verdict.verdict): named apart from the modules that hold them."""

from engram_top.compare.comparison import PROBE_ROW, Cell, Comparison, Row, compare
from engram_top.compare.measures import METRICS, Metric, Registry
from engram_top.compare.run_result import QUICK_CAVEAT, RunResult
from engram_top.compare.runs import compared_scenarios, from_file, run_results, warming_up
from engram_top.compare.runs import comparison as compare_runs
from engram_top.compare.slo import Slo
from engram_top.compare.verdict import (
    NO_INTERVAL,
    NOT_MEASURED,
    WARMING_UP,
    Finding,
    Verdict,
    held_findings,
    hold,
)
from engram_top.compare.verdict import verdict as verdict_of

__all__ = ["METRICS", "NOT_MEASURED", "NO_INTERVAL", "PROBE_ROW", "QUICK_CAVEAT", "WARMING_UP",
           "Cell",
           "Comparison", "Finding", "Metric", "Registry", "Row", "RunResult", "Slo", "Verdict",
           "compare", "compare_runs", "compared_scenarios", "from_file", "held_findings", "hold",
           "run_results", "verdict_of", "warming_up"]
