"""The supervisor's fit refusal as the dashboard can catch it (it imports no scenarios)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from engram_top.model.refusal import FitRefused
from scenarios.supervisor import DoesNotFit


class Refused(DoesNotFit, FitRefused):
    """Both: a SupervisorError for the commands, a FitRefused for the dashboard."""


@contextlib.contextmanager
def refusal_for_the_app() -> Iterator[None]:
    try:
        yield
    except Refused:
        raise
    except DoesNotFit as exc:
        raise Refused(exc.verdict) from None
