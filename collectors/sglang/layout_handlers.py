"""The handler of a launch command pasted into the log (``python -m sglang.launch_server
--model-path .. --tp 8 --dp 8 \\``, its lines going on while they end in a backslash), and
the launch's parallel layout as facts: sizes with their sources, ranks in GPU order.
"""

from __future__ import annotations

from collectors.sglang import parallel_layout
from collectors.sglang.launch_state import LaunchState
from collectors.sglang.line_prefix import LogLine
from collectors.sglang.phase_timeline import FINAL
from collectors.startup_facts import RankFacts

MAX_COMMAND_LINES = 64  # continuation lines read of one command


class LayoutHandlers(LaunchState):
    """Reads a launch command's parallel flags; lays the ranks out."""

    def _on_command(self, ln: LogLine, events: list[str]) -> None:
        # Only a command with flags (or lines to come) is one: a message that names the
        # module is no launch.
        if not parallel_layout.FLAG_WORD.search(ln.msg) \
                and not ln.msg.rstrip().endswith("\\"):
            return
        if self._phases.phase in FINAL and not self._is_late(ln.t):
            self._relaunch(ln, events)  # a command echoed after a run: the next launch
        self._command_lines = 0
        self._read_command(ln.msg)
        events.append("launch_command")

    def _read_command(self, text: str) -> None:
        for name, value in parallel_layout.command_sizes(text).items():
            self._command.setdefault(name, value)
        self._command_goes_on = text.rstrip().endswith("\\")

    def _command_continues(self, line: str) -> bool:
        """True while ``line`` is the next line of a command that ended in a backslash."""
        self._command_lines += 1
        if self._command_lines > MAX_COMMAND_LINES or not line.strip():
            self._command_goes_on = False
            return False
        self._read_command(line)
        return True

    def _layout(self) -> tuple[dict[int, RankFacts], dict[str, int], dict[str, str]]:
        """The ranks by GPU order, the parallel sizes and where each size came from."""
        args = self._server_args
        stated: dict[str, int | None] = {}
        dp_attention: bool | None = None
        if args is not None:
            stated = {"tp_size": args.tp_size, "dp_size": args.dp_size,
                      "pp_size": args.pp_size, "ep_size": args.ep_size}
            dp_attention = args.enable_dp_attention
        if dp_attention is None and self._command.get("enable_dp_attention") is True:
            dp_attention = True
        prefixes = parallel_layout.prefix_sizes(self._ranks, self._named_dims)
        sizes, sources = parallel_layout.sizes_and_sources(stated, self._command, prefixes)
        index = parallel_layout.rank_indices(self._ranks, sizes, dp_attention)
        ranks = {index[key]: st.freeze(index[key]) for key, st in self._ranks.items()}
        return dict(sorted(ranks.items())), sizes, sources
