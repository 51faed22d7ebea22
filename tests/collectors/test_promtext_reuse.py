"""A page parsed with what the last page of its source left (promtext.Reuse) reads exactly as
it reads alone: the same families, types, samples and skipped lines, whatever changed
between the two pages (values, label sets, a TYPE line, a line broken or mended, lines
dropped or repeated), and a page too large to keep leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors import promtext

DATA = Path(__file__).parents[1] / "data"
PAGES = [DATA / "sglang-cpu" / "metrics.txt",
         DATA / "vllm-cpu" / "metrics-after-4-requests.txt",
         DATA / "sim-pages" / "sglang-device" / "1-metrics.txt"]
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EDITS = ["value", "drop", "repeat", "break", "labels", "type", "spaces", "timestamp", "tab"]


def _edited(lines: list[str], edits: list[tuple[str, int]]) -> list[str]:
    out = list(lines)
    for kind, at in edits:
        i = at % len(out)
        line = out[i]
        if kind == "value" and line and not line.startswith("#"):
            out[i] = line.rsplit(" ", 1)[0] + f" {at % 997}.5"
        elif kind == "drop":
            del out[i]
        elif kind == "repeat":
            out.insert(i, line)
        elif kind == "break":
            out[i] = line.replace("}", "", 1) if "}" in line else line + " x y z"
        elif kind == "labels" and "{" in line:
            out[i] = line.replace("{", '{edited="1",', 1)
        elif kind == "type" and line.startswith("# TYPE"):
            name = line.split()[2]
            out[i] = f"# TYPE {name} {'gauge' if 'counter' in line else 'counter'}"
        elif kind == "spaces" and "{" in line:
            out[i] = line.replace("{", "{ ", 1)  # the careful path's shape
        # A series seen before, its value now followed by a timestamp after a blank or a
        # tab: neither is read as a new value of the series (its head).
        elif kind == "timestamp" and line and not line.startswith("#"):
            out[i] = f"{line} {at}"
        elif kind == "tab" and line and not line.startswith("#"):
            out[i] = f"{line}\t{at}"
        if not out:
            out = list(lines)
    return out


def _read(text: str, reuse: promtext.Reuse | None = None) -> tuple[str, list[str]]:
    """The families as text (NaN equals NaN there), and every line skipped."""
    skipped = promtext.Skipped(keep=1000)
    families = promtext.parse(text, skipped, reuse)
    return repr(families), [str(e) for e in skipped.first]


@SETTINGS
@given(page=st.sampled_from(PAGES),
       first=st.lists(st.tuples(st.sampled_from(EDITS), st.integers(0, 10**6)), max_size=8),
       second=st.lists(st.tuples(st.sampled_from(EDITS), st.integers(0, 10**6)), max_size=8))
def test_a_page_read_after_another_reads_as_it_reads_alone(
        page: Path, first: list[tuple[str, int]], second: list[tuple[str, int]]) -> None:
    lines = page.read_text().split("\n")
    before = "\n".join(_edited(lines, first))
    after = "\n".join(_edited(_edited(lines, first), second))
    reuse = promtext.Reuse()
    assert _read(before, reuse) == _read(before)
    # What the next page starts from.
    assert reuse.lines and reuse.labels and reuse.heads and reuse.comments
    assert _read(after, reuse) == _read(after)
    assert _read(before, reuse) == _read(before)  # and back


def test_a_line_broken_since_the_last_page_is_skipped_again_not_taken_from_it() -> None:
    good = '# TYPE x gauge\nx{a="1"} 1\nx{a="2"} 2\n'
    reuse = promtext.Reuse()
    promtext.parse(good, reuse=reuse)
    with pytest.raises(promtext.PromTextError, match="line 3"):
        promtext.parse('# TYPE x gauge\nx{a="1"} 1\nx{a="2" 2\n', reuse=reuse)
    assert [s.value for s in promtext.parse(good, reuse=reuse)["x"].samples] == [1.0, 2.0]


def test_a_page_of_more_lines_or_text_than_kept_leaves_nothing_for_the_next() -> None:
    reuse = promtext.Reuse(max_lines=3)
    promtext.parse("a 1\nb 2\nc 3\n", reuse=reuse)
    assert len(reuse.lines) == 3
    promtext.parse('a{x="1"} 1\nb 2\nc 3\nd 4\n', reuse=reuse)
    assert not (reuse.lines or reuse.labels or reuse.heads or reuse.comments)
    reuse = promtext.Reuse(max_chars=10)
    promtext.parse("a 1\n", reuse=reuse)
    assert len(reuse.lines) == 1
    promtext.parse(f'a{{x="{"y" * 20}"}} 1\n', reuse=reuse)  # over the characters kept
    assert not (reuse.lines or reuse.labels or reuse.heads or reuse.comments)


def test_which_series_count_is_kept_for_a_servers_label_sets_but_never_a_huge_family() -> None:
    """The schedulers' series are worked out once per label sets; a family with more label
    sets than any server has (a hostile page's) is worked out each time, never kept."""
    from collectors.sglang import families
    families._primary_kept.cache_clear()
    ranks = [(("tp_rank", str(i)),) for i in range(8)]
    huge = [(("tp_rank", str(i)),) for i in range(families.KEEP_SETS + 1)]
    assert families.primary(ranks) == families.primary(ranks) == {"": [ranks[0]]}
    assert families.primary(huge) == {"": [huge[0]]}
    info = families._primary_kept.cache_info()
    assert (info.hits, info.currsize) == (1, 1)
