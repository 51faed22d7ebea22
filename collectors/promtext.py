"""Prometheus text exposition format 0.0.4, parsed fast into a compact structure.

Why not prometheus_client's parser: it costs about 30 µs per sample (40 ms for one SGLang
page of ~1,300 samples), keeps ``le`` as a string and splits a page without TYPE lines into
one family per sample. Here one regex per line handles the common case and a careful
character scanner takes over for unusual lines (spaces inside ``{}``, a value glued to ``}``)
and names the fault when the line is broken.

Family membership follows Prometheus' Go parser rather than prometheus_client's streaming one:
a ``# TYPE x histogram`` line makes every later ``x_bucket``/``x_sum``/``x_count``/``x_created``
belong to family ``x`` wherever it appears; a sample whose name fits no declared family
becomes (or joins) an ``untyped`` family named after the sample. Counters keep the name of
their TYPE line (SGLang declares ``sglang:prompt_tokens_total``), sample names stay as written.
Bucket fragments with no TYPE line at all (``x_bucket{le=..}``, ``x_sum``, ``x_count``, as a
relabelling pipeline or a cut page leaves them) are still one histogram ``x``.

What is wrong with a page that still parses (a ``_count`` that disagrees with its ``+Inf``
bucket, a series given twice) is not an error: :func:`problems` names it.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from collectors.promline import (
    ESCAPE,
    FAST_LABEL,
    FAST_SAMPLE,
    HELP_ESCAPE,
    NAME_RE,
    Bad,
    Labels,
    careful_sample,
    parse_value,
    sorted_labels,
    unescape_char,
)

__all__ = [
    "Family",
    "Histogram",
    "PromTextError",
    "Reuse",
    "Sample",
    "Skipped",
    "histogram_series",
    "parse",
    "problems",
    "summed",
]


TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})

# Sample-name suffixes each family type accepts besides its own name ('' = the name itself).
# `_total` on counters covers OpenMetrics-style pages (`# TYPE x counter` + `x_total`).
_ALLOWED: dict[str, frozenset[str]] = {
    "counter": frozenset({"", "_total", "_created"}),
    "gauge": frozenset({""}),
    "histogram": frozenset({"_bucket", "_sum", "_count", "_created"}),
    "summary": frozenset({"", "_sum", "_count", "_created"}),
    "untyped": frozenset({""}),
}
_SUFFIXES = ("_bucket", "_sum", "_count", "_created", "_total")

@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Labels  # sorted by label name
    value: float
    # Milliseconds since the epoch when the line carries one (rare on /metrics pages).
    timestamp_ms: int | None = None


@dataclass(slots=True)
class Family:
    name: str
    type: str  # counter | gauge | histogram | summary | untyped
    help: str = ""
    samples: list[Sample] = field(default_factory=list)
    # A histogram's series as histogram_series read them, with what it said of them, and
    # how many samples it read: a poll reads a histogram twice (its problems, its merged
    # buckets), a page's families are complete once parse returns, and a family still being
    # filled has another count.
    _series: tuple[int, dict[Labels, Histogram], tuple[str, ...]] | None = field(
        default=None, init=False, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Histogram:
    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), sorted, +Inf last
    sum: float  # NaN when the page has no _sum (gauge histograms)
    count: float


class PromTextError(ValueError):
    """A line the parser cannot read; ``str()`` names the line number and shows the line."""

    MAX_SHOWN = 120

    def __init__(self, line_no: int, line: str, reason: str) -> None:
        super().__init__(line_no, line, reason)
        self.line_no = line_no
        self.line = line
        self.reason = reason

    def __str__(self) -> str:
        shown = self.line
        if len(shown) > self.MAX_SHOWN:
            shown = shown[: self.MAX_SHOWN - 3] + "..."
        return f"line {self.line_no}: {self.reason}: {shown!r}"


@dataclass(slots=True)
class Skipped:
    """The lines a lenient parse() left out: the first few whole, all of them counted. A
    page pasted with an author's ``...`` between families, or two pages run together, loses
    those lines and keeps every other figure."""

    keep: int = 5
    first: list[PromTextError] = field(default_factory=list)
    count: int = 0

    def add(self, error: PromTextError) -> None:
        self.count += 1
        if len(self.first) < self.keep:
            self.first.append(error)

    def __str__(self) -> str:
        more = self.count - len(self.first)
        return (f"{self.count:,} line{'s' if self.count != 1 else ''} skipped: "
                + "; ".join(str(e) for e in self.first) + (f"; {more:,} more" if more else ""))


@dataclass(slots=True)
class Reuse:
    """What a page's parse keeps for the next page of its server: each line's sample (a busy
    server's page changes every second, yet a third of its lines and nearly all label sets
    repeat), the label sets by their text, each series' head and each comment line read;
    nothing past ``max_lines`` or ``max_chars``."""

    max_lines: int = 20_000
    max_chars: int = 4 * 2**20  # a real engine's page is tens to hundreds of kB
    lines: dict[str, Sample] = field(default_factory=dict)  # line -> its Sample
    labels: dict[str, Labels] = field(default_factory=dict)
    # A line's text up to its value ("x{a=\"1\"} ") -> its name and labels: a busy page's
    # new lines are mostly old series with new values, read then without the regex.
    heads: dict[str, tuple[str, Labels]] = field(default_factory=dict)
    comments: dict[str, tuple[str, ...]] = field(default_factory=dict)  # line -> _comment_parts


def parse(text: str, skipped: Skipped | None = None, reuse: Reuse | None = None
          ) -> dict[str, Family]:
    """Parse a /metrics page into families keyed by family name, samples in page order.

    Raises PromTextError (a ValueError) for the first line it cannot read; with
    ``skipped``, puts each such line there instead and reads on. ``reuse``: see Reuse."""
    families: dict[str, Family] = {}
    typed: set[str] = set()
    by_sample: dict[str, Family] = {}  # sample name -> its family, resolved once per page
    label_cache: dict[str, Labels] = {} if reuse is None else reuse.labels  # `{...}` -> labels
    heads = None if reuse is None else reuse.heads
    comments = None if reuse is None else reuse.comments
    last_lines, lines = ({} if reuse is None else reuse.lines), {}
    keeping = reuse is not None and len(text) <= reuse.max_chars
    fast = FAST_SAMPLE.fullmatch
    for line_no, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line:
            continue
        try:
            if line[0] == "#":
                parts = None if comments is None else comments.get(line)
                if parts is None:
                    parts = _comment_parts(line)
                    if comments is not None:
                        comments[line] = parts
                if parts:
                    _comment(parts, families, typed)
                continue
            sample = last_lines.get(line)
            if sample is None and heads is not None:  # a series seen before, a new value?
                cut = line.rfind(" ") + 1
                known = heads.get(line[:cut]) if cut else None
                value = line[cut:]
                if known is not None and "\t" not in value:  # (a tab: a timestamp after)
                    sample = Sample(known[0], known[1], parse_value(value), None)
            if sample is None:
                sample = _sample(line, fast, label_cache, heads)
            if keeping:  # no other caller pays for the next page's lines
                lines[line] = sample
            name = sample.name
            fam = by_sample.get(name)
            if fam is None:
                fam = by_sample[name] = _resolve(name, families)
            fam.samples.append(sample)
        except Bad as exc:
            if skipped is None:
                raise PromTextError(line_no, line, str(exc)) from None
            skipped.add(PromTextError(line_no, line, str(exc)))
    _adopt_histograms(families, typed)
    if reuse is not None:
        keep = keeping and len(lines) <= reuse.max_lines
        reuse.lines = lines if keep else {}
        if not keep or len(label_cache) > reuse.max_lines:
            label_cache.clear()
        for kept in (reuse.heads, reuse.comments):
            if not keep or len(kept) > reuse.max_lines:
                kept.clear()
    return families


def _sample(line: str, fast: Callable[[str], re.Match[str] | None],
            label_cache: dict[str, Labels], heads: dict[str, tuple[str, Labels]] | None
            ) -> Sample:
    m = fast(line)
    if m is None:  # an unusual shape: the careful path, which names a fault
        return Sample(*careful_sample(line))
    name, raw_labels, value_text, ts_text = m.groups()
    if raw_labels:
        labels = label_cache.get(raw_labels)
        if labels is None:
            labels = label_cache[raw_labels] = _fast_labels(raw_labels)
    else:
        labels = ()
    if heads is not None and line[m.start(3) - 1] == " ":
        # The series' head (its text up to the value), for parse() to read its next value
        # by: head + any text without a blank or tab is a line this regex reads as that
        # name, those labels and that text as the value.
        heads[line[:m.start(3)]] = (name, labels)
    return Sample(name, labels, parse_value(value_text),
                  int(ts_text) if ts_text is not None else None)


def _adopt_histograms(families: dict[str, Family], typed: set[str]) -> None:
    """``x_bucket`` samples with ``le`` labels and no TYPE line: the histogram ``x``, with
    ``x_sum`` and ``x_count`` (themselves untyped) joining it."""
    for name in [n for n in families if n.endswith("_bucket") and n not in typed]:
        bucket = families[name]
        base = name[: -len("_bucket")]
        if bucket.type != "untyped" or not bucket.samples or base in typed \
                or not all(any(k == "le" for k, _ in s.labels) for s in bucket.samples):
            continue
        existing = families.get(base)
        if existing is not None and existing.samples:
            continue  # "x" itself has samples: the fragments are not its histogram
        fam = Family(base, "histogram", existing.help if existing else "")
        for part in (name, base + "_sum", base + "_count"):
            other = families.get(part)
            if other is not None and other.type == "untyped" and part not in typed:
                fam.samples.extend(other.samples)
                del families[part]
        families[base] = fam


def _fast_labels(raw: str) -> Labels:
    pairs = FAST_LABEL.findall(raw)
    if "\\" in raw:
        pairs = [(k, ESCAPE.sub(unescape_char, v)) for k, v in pairs]
    return sorted_labels(pairs)


def _comment_parts(line: str) -> tuple[str, ...]:
    """A comment line's keyword, metric name and help text or type, checked (a busy page's
    comments are the same every time: Reuse keeps them); () for a plain comment."""
    parts = line[1:].split(None, 2)
    if not parts or parts[0] not in ("HELP", "TYPE"):
        return ()
    keyword = parts[0]
    if len(parts) < 2:
        raise Bad(f"{keyword} line without a metric name")
    name = parts[1]
    if NAME_RE.fullmatch(name) is None:
        raise Bad(f"invalid metric name {name!r} in {keyword} line")
    if keyword == "HELP":
        return keyword, name, HELP_ESCAPE.sub(unescape_char, parts[2]) if len(parts) > 2 else ""
    if len(parts) < 3:
        raise Bad(f"TYPE line for {name!r} without a type")
    if parts[2] not in TYPES:
        raise Bad(f"unknown metric type {parts[2]!r}")
    return keyword, name, parts[2]


def _comment(parts: tuple[str, ...], families: dict[str, Family], typed: set[str]) -> None:
    keyword, name, text = parts
    fam = families.get(name)
    if keyword == "HELP":
        if fam is None:
            families[name] = Family(name, "untyped", text)
        else:
            fam.help = text
        return
    typ = text  # a TYPE line's
    if fam is None:
        families[name] = Family(name, typ)
    elif name in typed:
        if fam.type != typ:
            raise Bad(f"second TYPE line for {name!r} ({fam.type} then {typ})")
    elif fam.samples:
        # Earlier samples were filed as untyped; re-filing them silently would hide a broken page.
        raise Bad(f"TYPE line for {name!r} after its samples")
    else:
        fam.type = typ
    typed.add(name)


def _resolve(name: str, families: dict[str, Family]) -> Family:
    fam = families.get(name)
    if fam is not None:
        if "" not in _ALLOWED[fam.type]:
            raise Bad(f"sample {name!r} does not belong to {fam.type} {name!r}")
        return fam
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            fam = families.get(base)
            if fam is not None and suffix in _ALLOWED[fam.type]:
                return fam
            if suffix == "_created":  # x_created of a counter declared as x_total
                fam = families.get(base + "_total")
                if fam is not None and fam.type == "counter":
                    return fam
    fam = families[name] = Family(name, "untyped")
    return fam


# --------------------------------------------------------------------------- helpers


def histogram_series(family: Family,
                     issues: list[str] | None = None) -> dict[Labels, Histogram]:
    """Group a histogram family's samples by label set (without ``le``).

    A series without a ``+Inf`` bucket gets one from ``_count``; one without ``_count`` takes
    its count from the ``+Inf`` bucket (NaN if neither). A ``_count`` that disagrees with the
    ``+Inf`` bucket (a page cut inside a number: "24" for "2402") loses to the bucket, which
    the quantiles are read from, and is said in ``issues``. ``_created`` samples are ignored.
    """
    if family.type != "histogram":
        raise ValueError(f"{family.name} is a {family.type}, not a histogram")
    kept = family._series
    if kept is not None and kept[0] == len(family.samples):
        if issues is not None:
            issues.extend(kept[2])
        return dict(kept[1])
    said: list[str] = []
    bucket_name = family.name + "_bucket"
    sum_name = family.name + "_sum"
    count_name = family.name + "_count"
    buckets: dict[Labels, list[tuple[float, float]]] = {}
    sums: dict[Labels, float] = {}
    counts: dict[Labels, float] = {}
    for s in family.samples:
        if s.name == bucket_name:
            rest, bound = _bucket_of(bucket_name, s.labels)
            buckets.setdefault(rest, []).append((bound, s.value))
        elif s.name == sum_name:
            sums[s.labels] = s.value
        elif s.name == count_name:
            counts[s.labels] = s.value
    out: dict[Labels, Histogram] = {}
    for key in {**buckets, **counts}:
        bs = sorted(buckets.get(key, ()))
        count = counts.get(key)
        if (not bs or bs[-1][0] != math.inf) and count is not None:
            bs.append((math.inf, count))
        if count is not None and bs[-1][1] != count and not math.isnan(count):
            said.append(f"{family.name}{_shown(key)}: _count {count:g} disagrees with its "
                        f"+Inf bucket {bs[-1][1]:g}")
            count = bs[-1][1]
        if count is None:
            count = bs[-1][1] if bs and bs[-1][0] == math.inf else math.nan
        out[key] = Histogram(tuple(bs), sums.get(key, math.nan), count)
    family._series = (len(family.samples), out, tuple(said))
    if issues is not None:
        issues.extend(said)
    return dict(out)


@functools.lru_cache(maxsize=4096)
def _bucket_of(bucket_name: str, labels: Labels) -> tuple[Labels, float]:
    """A bucket's series (its labels but ``le``) and bound: the same label sets come on every
    page of a server, so they are worked out once."""
    le: str | None = None
    rest: list[tuple[str, str]] = []
    for k, v in labels:
        if k == "le":
            le = v
        else:
            rest.append((k, v))
    if le is None:
        raise ValueError(f"{bucket_name}{dict(labels)} has no 'le' label")
    try:
        return tuple(rest), parse_value(le)
    except Bad:
        raise ValueError(f"{bucket_name} has an invalid bound le={le!r}") from None


def summed(series: list[Histogram]) -> Histogram:
    """Several series of one histogram added bucket by bucket: sum by (le) (...)."""
    if len(series) == 1:
        return series[0]
    counts: dict[float, float] = {}
    total = count = 0.0
    for hist in series:
        for bound, c in hist.buckets:
            counts[bound] = counts.get(bound, 0.0) + c
        total += hist.sum
        count += hist.count
    return Histogram(buckets=tuple(sorted(counts.items())), sum=total, count=count)


def _shown(labels: Labels) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else ""


def problems(family: Family) -> list[str]:
    """What is wrong with a family that parsed: each series given more than once (the first
    is what the readers here use), and for a histogram each _count that disagrees with its
    +Inf bucket."""
    out: list[str] = []
    seen: set[tuple[str, Labels]] = set()
    twice: dict[tuple[str, Labels], int] = {}
    for s in family.samples:
        key = (s.name, s.labels)
        if key in seen:
            twice[key] = twice.get(key, 1) + 1
        else:
            seen.add(key)
    for (name, labels), n in twice.items():
        out.append(f"{name}{_shown(labels)} is given {n} times in one page")
    if family.type == "histogram":
        try:
            histogram_series(family, out)
        except ValueError as exc:
            out.append(str(exc))
    return out
