"""collectors.promtext against prometheus_client's parser, and the windowed math by hand."""

from __future__ import annotations

import math
import random

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Summary, generate_latest
from prometheus_client import Histogram as PcHistogram
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from benchmarks.bench_parse import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS, make_page
from collectors.promread import counter_total, gauge
from collectors.promtext import (
    Histogram,
    PromTextError,
    Sample,
    Skipped,
    histogram_series,
    parse,
    problems,
)
from collectors.readings import Quantiles
from collectors.windowed import (
    WindowedHistogram,
    WindowedRate,
    histogram_quantile,
)

INF = math.inf

# --------------------------------------------------------------------------- differential


def _v(value: float) -> float | str:
    f = float(value)
    return "NaN" if math.isnan(f) else f  # NaN != NaN; compare a marker instead


def ours_view(page: str) -> dict[str, tuple[str, str, list[tuple]]]:
    out = {}
    for fam in parse(page).values():
        samples = [
            (s.name, s.labels, _v(s.value),
             None if s.timestamp_ms is None else s.timestamp_ms / 1000)
            for s in fam.samples
        ]
        out[fam.name] = (fam.type, fam.help, samples)
    return out


def pc_view(page: str) -> dict[str, tuple[str, str, list[tuple]]]:
    out: dict[str, tuple[str, str, list[tuple]]] = {}
    for m in text_string_to_metric_families(page):
        name, typ = m.name, m.type
        if typ == "counter":
            # prometheus_client drops `_total` from counter family names; every counter in
            # these pages is declared with it (as SGLang does), so put it back.
            name += "_total"
        if typ == "unknown":
            typ = "untyped"
        samples = [
            (s.name, tuple(sorted(s.labels.items())), _v(s.value), s.timestamp)
            for s in m.samples
        ]
        if name in out:  # prometheus_client yields each untyped sample as its own family
            out[name][2].extend(samples)
        else:
            out[name] = (typ, m.documentation, samples)
    return out


def assert_same(page: str) -> None:
    ours, theirs = ours_view(page), pc_view(page)
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name] == theirs[name], name


NASTY_VALUES = [
    "plain", 'with "quotes"', "back\\slash", "new\nline", "trailing\\", "{braces},=# x",
    "ünïcødé 模型", "", " spaced  out ", "\\n not a newline", '\\"', "Qwen/Qwen3-8B",
]
VALUE_TEXTS = ["0", "1", "42", "-3", "0.25", "1e-05", "1.5e+10", "-2.5", "NaN", "+Inf", "-Inf",
               "123456789.0", "7.0"]


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class PageWriter:
    """Random SGLang-style pages with the irregularities the format allows."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.lines: list[str] = []

    def labels_text(self, labels: dict[str, str]) -> str:
        rng = self.rng
        if not labels:
            return rng.choice(["", "{}"])
        items = list(labels.items())
        rng.shuffle(items)  # order on the page must not matter
        sep = rng.choice([",", ",", ",", ", ", " , "])  # spaces take the careful path
        body = sep.join(f"{k}=\"{_esc(v)}\"" for k, v in items)
        if rng.random() < 0.1:
            body += ","
        return "{" + body + "}"

    def sample(self, name: str, labels: dict[str, str], value: str | None = None) -> None:
        rng = self.rng
        value = value if value is not None else rng.choice(VALUE_TEXTS)
        gap = rng.choice([" ", " ", " ", "\t", "  "])
        line = f"{name}{self.labels_text(labels)}{gap}{value}"
        if rng.random() < 0.1:
            line += gap + str(rng.choice([1700000000123, 0, -5, 1]))
        if rng.random() < 0.05:
            line = rng.choice([" ", "\t"]) + line + rng.choice([" ", "\t"])
        self.lines.append(line)

    def noise(self) -> None:
        if self.rng.random() < 0.2:
            self.lines.append(self.rng.choice(["", "# a comment", "#", "   ", "# HELPER text"]))

    def header(self, name: str, typ: str | None, doc: str | None) -> None:
        if doc is not None:
            self.lines.append(f"# HELP {name} {doc}".rstrip())
        if typ is not None:
            self.lines.append(f"# TYPE {name} {typ}")

    def label_sets(self, n: int) -> list[dict[str, str]]:
        rng = self.rng
        return [
            {
                "model_name": rng.choice(NASTY_VALUES),
                "engine_type": rng.choice(["unified", "prefill", "decode"]),
                "tp_rank": str(i),
                "pp_rank": "0",
                "moe_ep_rank": str(rng.randrange(4)),
            }
            for i in range(n)
        ]

    def page(self) -> str:
        rng = self.rng
        sets = self.label_sets(rng.randint(1, 4))
        for i in range(rng.randint(1, 5)):
            name = f"sglang:gauge_{i}"
            self.header(name, "gauge", rng.choice(["The gauge.", "Escaped \\\\ and \\n.", ""]))
            for ls in sets:
                self.sample(name, ls)
                self.noise()
        for i in range(rng.randint(1, 3)):
            name = f"sglang:counter_{i}_total"
            self.header(name, "counter", f"Counter {i}.")
            for ls in sets:
                self.sample(name, ls, str(rng.randrange(10**6)))
            self.noise()
        hists = [("ttft", TTFT_BUCKETS), ("itl", ITL_BUCKETS), ("e2e", E2E_BUCKETS)]
        for short, bounds in rng.sample(hists, rng.randint(1, 3)):
            name = f"sglang:{short}_seconds"
            self.header(name, "histogram", f"Histogram {short}.")
            for ls in sets:
                total = 0
                for b in [*bounds, INF]:
                    total += rng.randrange(50)
                    self.sample(f"{name}_bucket", {**ls, "le": floatToGoString(b)}, str(total))
                self.sample(f"{name}_sum", ls, floatToGoString(total * 0.31))
                self.sample(f"{name}_count", ls, str(total))
                self.noise()
        name = "sglang:eplb_balancedness"
        self.header(name, "summary", "A summary.")
        for q in ("0.5", "0.9"):
            self.sample(name, {"quantile": q})
        self.sample(f"{name}_sum", {}, "3.5")
        self.sample(f"{name}_count", {}, "7")
        self.header("sglang:help_only", None, "No TYPE line.")
        self.sample("sglang:help_only", {"a": "b"})
        for i in range(rng.randint(0, 3)):  # no HELP, no TYPE
            for ls in sets[:2]:
                self.sample(f"loose_metric_{i}", ls)
        return ("\r\n" if rng.random() < 0.1 else "\n").join(self.lines) + "\n"


@pytest.mark.parametrize("seed", range(60))
def test_random_pages_agree_with_prometheus_client(seed: int) -> None:
    assert_same(PageWriter(seed).page())


def test_benchmark_page_agrees_with_prometheus_client() -> None:
    page = make_page(label_sets=3)
    assert_same(page)
    fams = parse(page)
    assert len(fams) == 30
    assert fams["sglang:prompt_tokens_total"].type == "counter"


def test_generate_latest_page() -> None:
    reg = CollectorRegistry()
    c = Counter("engram_requests", "Requests served.", ["model_name"], registry=reg)
    g = Gauge("engram_running", "Running requests.\nSecond line \\ here.", ["tp_rank"],
              registry=reg)
    h = PcHistogram("engram_ttft_seconds", "TTFT.", ["model_name"], buckets=TTFT_BUCKETS,
                    registry=reg)
    s = Summary("engram_latency_seconds", "Latency.", registry=reg)
    c.labels(model_name='m "1"').inc(3)
    c.labels(model_name="m\\2\n").inc(4.5)
    g.labels(tp_rank="0").set(7)
    g.labels(tp_rank="1").set(float("nan"))
    for v in (0.05, 0.15, 0.5, 3.0, 500.0):
        h.labels(model_name="m").observe(v)
    s.observe(0.25)
    page = generate_latest(reg).decode()
    assert_same(page)

    fams = parse(page)
    assert fams["engram_requests_total"].type == "counter"
    assert fams["engram_requests_created"].type == "gauge"  # its own TYPE line wins
    assert counter_total(fams, "engram_requests_total") == 7.5
    assert counter_total(fams, "engram_requests") == 7.5
    assert gauge(fams, "engram_running", tp_rank=0) == 7
    assert fams["engram_running"].help == "Running requests.\nSecond line \\ here."
    series = histogram_series(fams["engram_ttft_seconds"])
    (key, hist), = series.items()
    assert key == (("model_name", "m"),)
    assert hist.count == 5 and hist.sum == pytest.approx(503.7)
    assert hist.buckets[0] == (0.1, 1) and hist.buckets[-1] == (INF, 5)
    assert [b for b, _ in hist.buckets] == [*map(float, TTFT_BUCKETS), INF]
    assert dict(hist.buckets)[400.0] == 4


def test_mutated_pages_fail_cleanly() -> None:
    # A broken page must give PromTextError (a clear message), never IndexError & co.
    rng = random.Random(7)
    failures = 0
    for i in range(400):
        chars = list(PageWriter(i).page())
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(chars))
            chars.insert(pos, rng.choice('"{}\\=, \t#\nan_:1.-+eE'))
        try:
            parse("".join(chars))
        except PromTextError:
            failures += 1
    assert failures > 100  # the mutations do break pages


# --------------------------------------------------------------------------- structure


def test_unusual_but_valid_lines() -> None:
    page = "\n".join([
        "# TYPE x gauge",
        'x {a="1"} 1',          # blank before '{'
        'x{a="2"}2',            # value glued to '}'
        'x{ a = "3" , } 3',     # blanks everywhere, trailing comma
        'x{a="4"} 4 -1700',     # negative timestamp
        'x{} NaN',
    ])
    s = parse(page)["x"].samples
    assert [x.labels for x in s][:4] == [(("a", str(i)),) for i in range(1, 5)]
    assert [x.value for x in s][:4] == [1, 2, 3, 4]
    assert s[3].timestamp_ms == -1700 and s[4].labels == () and math.isnan(s[4].value)


def test_untyped_samples_group_by_name() -> None:
    fams = parse('a 1\na{b="c"} 2\nb_bucket{le="1"} 1\nc_bucket{x="1"} 1\n')
    assert fams["a"].type == "untyped" and len(fams["a"].samples) == 2
    # Bucket fragments without a TYPE line are still a histogram, by their names and le.
    assert fams["b"].type == "histogram" and "b_bucket" not in fams
    assert fams["c_bucket"].type == "untyped"  # no le: not a bucket


def test_created_series_join_their_family() -> None:
    page = "\n".join([
        "# TYPE h histogram",
        'h_bucket{le="1"} 1', 'h_bucket{le="+Inf"} 2', "h_sum 3", "h_count 2",
        "h_created 1.7e9",
        "# TYPE c_total counter",
        'c_total{a="x"} 5', 'c_total{a="y"} 6', 'c_created{a="x"} 1.7e9',
        "# TYPE o counter",  # OpenMetrics style: samples carry _total
        "o_total 4",
    ])
    fams = parse(page)
    assert set(fams) == {"h", "c_total", "o"}
    assert fams["h"].samples[-1].name == "h_created"
    assert histogram_series(fams["h"])[()] == Histogram(((1.0, 1), (INF, 2)), 3, 2)
    assert counter_total(fams, "c_total") == 11
    assert counter_total(fams, "o") == 4 and counter_total(fams, "o_total") == 4


def test_histogram_series_fills_gaps() -> None:
    page = "\n".join([
        "# TYPE h histogram",
        'h_bucket{le="2",r="0"} 3', 'h_bucket{le="1",r="0"} 1', 'h_count{r="0"} 4',
        'h_sum{r="0"} 5',
        'h_bucket{le="1",r="1"} 1', 'h_bucket{le="+Inf",r="1"} 2',  # gauge histogram
    ])
    series = histogram_series(parse(page)["h"])
    r0, r1 = series[(("r", "0"),)], series[(("r", "1"),)]
    assert r0.buckets == ((1.0, 1), (2.0, 3), (INF, 4)) and r0.count == 4 and r0.sum == 5
    assert r1.count == 2 and math.isnan(r1.sum)
    with pytest.raises(ValueError, match="not a histogram"):
        histogram_series(parse("# TYPE g gauge\ng 1\n")["g"])


def test_a_histogram_read_twice_reads_the_same_and_says_the_same() -> None:
    # A poll reads each histogram for its problems and for its buckets: the second read
    # is the first's, unless the family has samples the first read did not see.
    fam = parse("\n".join([
        "# TYPE h histogram",
        'h_bucket{le="1"} 1', 'h_bucket{le="+Inf"} 3', "h_count 30", "h_sum 2",
    ]))["h"]
    first: list[str] = []
    series = histogram_series(fam, first)
    series[()] = Histogram((), 0, 0)  # what a reader does with its dict stays its own
    again: list[str] = []
    assert histogram_series(fam, again) == {(): Histogram(((1.0, 1), (INF, 3)), 2, 3)}
    assert again == first == ["h: _count 30 disagrees with its +Inf bucket 3"]
    assert problems(fam) == first
    fam.samples.append(Sample("h_bucket", (("le", "+Inf"), ("r", "1")), 4))
    grown = histogram_series(fam)[(("r", "1"),)]
    assert (grown.buckets, grown.count) == (((INF, 4),), 4) and math.isnan(grown.sum)


@pytest.mark.parametrize(("bucket", "said"), [
    ('h_bucket{r="0"} 1', r"h_bucket\{'r': '0'\} has no 'le' label"),
    ('h_bucket{le="1_0",r="0"} 1', r"h_bucket has an invalid bound le='1_0'"),
    ('h_bucket{le="fast"} 1', r"h_bucket has an invalid bound le='fast'"),
])
def test_a_bucket_without_a_bound_is_named_every_time(bucket: str, said: str) -> None:
    # Bounds are worked out once per label set: a broken one is said on every page.
    for _ in range(2):
        with pytest.raises(ValueError, match=said):
            histogram_series(parse(f"# TYPE h histogram\n{bucket}\n")["h"])


def test_gauge_and_counter_helpers() -> None:
    page = "\n".join([
        "# TYPE g gauge",
        'g{tp_rank="0",m="a"} 1', 'g{tp_rank="1",m="a"} 2', 'g{tp_rank="1",m="b"} 3',
        "# TYPE c_total counter",
    ])
    fams = parse(page)
    assert gauge(fams, "g") == 1  # first series, not a sum
    assert gauge(fams, "g", tp_rank=1) == 2
    assert gauge(fams, "g", tp_rank="1", m="b") == 3
    assert gauge(fams, "g", tp_rank=9) is None
    assert gauge(fams, "missing") is None
    assert counter_total(fams, "c_total") is None  # declared, no samples
    assert counter_total(fams, "missing_total") is None


@pytest.mark.parametrize(
    ("page", "line_no", "reason"),
    [
        ('ok 1\nx{a="b} 1\n', 2, "unterminated value of label 'a'"),
        ("x{a=b} 1", 1, "not quoted"),
        ('x{a="1" b="2"} 1', 1, "expected ',' or '}'"),
        ('x{a="1"', 1, "missing '}'"),
        ('x{1a="1"} 1', 1, "invalid label name"),
        ('x{a="1",a="2"} 1', 1, "duplicate label name 'a'"),
        ('x{a="\\q"} 1', 1, "invalid escape sequence"),
        ("x abc", 1, "invalid value 'abc'"),
        ("x 1_000", 1, "invalid value"),
        ("x", 1, "missing value"),
        ("x 1 2 3", 1, "unexpected text after timestamp"),
        ("x 1 1.5", 1, "invalid timestamp"),
        ("9x 1", 1, "invalid metric name"),
        ("x-y 1", 1, "invalid character '-'"),
        ('{"utf.8"} 1', 1, "metric name missing"),
        ("\n\n# TYPE x foo", 3, "unknown metric type 'foo'"),
        ("# TYPE x", 1, "without a type"),
        ("# HELP", 1, "without a metric name"),
        ("# TYPE 1x gauge", 1, "invalid metric name '1x'"),
        ("# TYPE x gauge\n# TYPE x counter", 2, "second TYPE line"),
        ("x 1\n# TYPE x gauge", 2, "after its samples"),
        ("# TYPE h histogram\nh 1", 2, "does not belong to histogram"),
    ],
)
def test_malformed_lines(page: str, line_no: int, reason: str) -> None:
    with pytest.raises(PromTextError) as info:
        parse(page)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.line_no == line_no and reason in err.reason
    assert str(err).startswith(f"line {line_no}: ")
    assert repr(page.split("\n")[line_no - 1].strip()) in str(err)


def test_error_message_truncates_long_lines() -> None:
    bad = 'x{a="' + "v" * 500 + '" 1'
    with pytest.raises(PromTextError) as info:
        parse("# TYPE x gauge\n" + bad)
    text = str(info.value)
    assert text.startswith("line 2: ") and "..." in text and len(text) < 250


# --------------------------------------------------------------------------- quantiles

BUCKETS = ((0.1, 10), (0.2, 30), (0.4, 40), (INF, 40))


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.5, 0.15),      # rank 20 in (0.1, 0.2]: 0.1 + 0.1 * 10/20
        (0.99, 0.392),    # rank 39.6 in (0.2, 0.4]: 0.2 + 0.2 * 9.6/10
        (0.1, 0.04),      # rank 4 in the first bucket, lower edge 0
        (0.25, 0.1),      # rank 10 exactly at the first bound
        (1.0, 0.4),
    ],
)
def test_histogram_quantile_by_hand(q: float, expected: float) -> None:
    assert histogram_quantile(q, BUCKETS) == pytest.approx(expected)


def test_histogram_quantile_edges() -> None:
    in_inf = ((0.1, 5), (0.2, 5), (INF, 10))
    assert histogram_quantile(0.99, in_inf) == 0.2  # +Inf bucket: highest finite bound
    assert histogram_quantile(0.5, ((0.1, 0), (INF, 0))) is None  # no observations
    assert histogram_quantile(0.5, ((0.1, 3), (0.2, 4))) is None  # no +Inf bucket
    assert histogram_quantile(0.5, ((INF, 4),)) is None  # no finite bucket
    assert histogram_quantile(-0.1, BUCKETS) == -INF
    assert histogram_quantile(1.1, BUCKETS) == INF
    assert histogram_quantile(float("nan"), BUCKETS) is None
    assert histogram_quantile(0.5, ((-1.0, 2), (1.0, 4), (INF, 4))) == -1.0
    assert histogram_quantile(0.5, tuple(reversed(BUCKETS))) == pytest.approx(0.15)
    # A non-atomic scrape's dip (30 then 28) is flattened, as Prometheus does.
    assert histogram_quantile(0.5, ((0.1, 10), (0.2, 30), (0.4, 28), (INF, 40))) == (
        pytest.approx(0.15)
    )
    assert histogram_quantile(0.0, ((0.1, 0), (0.2, 5), (INF, 5))) == 0.0


# --------------------------------------------------------------------------- windows

BOUNDS = (0.1, 0.2, 0.4, INF)


def cumulative(per_bucket: list[float], obs_sum: float) -> Histogram:
    acc, buckets = 0.0, []
    for b, n in zip(BOUNDS, per_bucket, strict=True):
        acc += n
        buckets.append((b, acc))
    return Histogram(tuple(buckets), obs_sum, acc)


def test_windowed_histogram_uses_delta_over_window() -> None:
    w = WindowedHistogram(window_s=5)
    counts, total_sum = [0.0, 0.0, 0.0, 0.0], 0.0
    for t in range(21):
        if t <= 10:  # fast phase: 10 obs/s of 0.05 s
            counts[0] += 10
            total_sum += 10 * 0.05
        else:  # slow phase: 10 obs/s of 0.3 s
            counts[2] += 10
            total_sum += 10 * 0.3
        w.add(float(t), cumulative(counts, total_sum))
    assert w.span() == 5  # scrapes 15..20 kept: bounded memory
    q = w.quantiles(now=20.0)
    assert q.count == 50
    assert q.mean == pytest.approx(0.3)
    assert q.p50 == pytest.approx(0.3)     # rank 25 of 50 in (0.2, 0.4]
    assert q.p99 == pytest.approx(0.398)   # rank 49.5
    # Straddling both phases: window 8..13 holds 20 fast + 30 slow observations.
    w2 = WindowedHistogram(window_s=5)
    counts, total_sum = [0.0, 0.0, 0.0, 0.0], 0.0
    for t in range(14):
        if t <= 10:
            counts[0] += 10
            total_sum += 0.5
        else:
            counts[2] += 10
            total_sum += 3.0
        w2.add(float(t), cumulative(counts, total_sum))
    q2 = w2.quantiles(now=13.0)
    assert q2.count == 50 and q2.mean == pytest.approx((1.0 + 9.0) / 50)
    assert q2.p50 == pytest.approx(0.2 + 0.2 * (25 - 20) / 30)
    d = w2.delta(13.0)
    assert d is not None and d.buckets == ((0.1, 20), (0.2, 20), (0.4, 50), (INF, 50))


def test_windowed_histogram_without_data() -> None:
    w = WindowedHistogram(window_s=10)
    empty = Quantiles(None, None, None, 0.0)
    assert w.quantiles(now=0.0) == empty
    w.add(0.0, cumulative([1, 0, 0, 0], 0.05))
    assert w.quantiles(now=1.0) == empty  # one scrape: no delta yet
    w.add(1.0, cumulative([1, 0, 0, 0], 0.05))
    assert w.quantiles(now=1.0) == empty  # nothing observed in the window
    w.add(2.0, cumulative([2, 0, 0, 0], 0.10))
    assert w.quantiles(now=2.0).count == 1
    assert w.quantiles(now=100.0) == empty  # source went quiet: stale, not the old figure
    g = WindowedHistogram(window_s=10)  # gauge histogram: no _sum
    g.add(0.0, cumulative([0, 0, 0, 0], math.nan))
    g.add(1.0, cumulative([0, 4, 0, 0], math.nan))
    assert g.quantiles(now=1.0).mean is None and g.quantiles(now=1.0).count == 4


def test_windowed_histogram_counter_reset_restarts_window() -> None:
    w = WindowedHistogram(window_s=60)
    w.add(0.0, cumulative([100, 0, 0, 0], 5.0))
    w.add(1.0, cumulative([110, 0, 0, 0], 5.5))
    w.add(2.0, cumulative([0, 3, 0, 0], 0.45))  # server restarted
    assert w.resets == 1
    assert w.quantiles(now=2.0).count == 0  # new baseline only
    w.add(3.0, cumulative([0, 5, 0, 0], 0.75))
    q = w.quantiles(now=3.0)
    assert q.count == 2 and q.mean == pytest.approx(0.15) and 0.1 <= q.p50 <= 0.2
    # Restarted with other bucket flags: also a new window.
    w.add(4.0, Histogram(((1.0, 9), (INF, 9)), 1.0, 9))
    assert w.resets == 2 and w.quantiles(now=4.0).count == 0
    # A restart that already passed the old count still shows as a per-bucket drop.
    w.add(5.0, Histogram(((1.0, 20), (INF, 20)), 2.0, 20))
    w.add(6.0, Histogram(((1.0, 0), (INF, 25)), 50.0, 25))
    assert w.resets == 3


def test_windowed_histogram_ignores_out_of_order_and_repeats() -> None:
    w = WindowedHistogram(window_s=60)
    w.add(0.0, cumulative([0, 0, 0, 0], 0.0))
    w.add(5.0, cumulative([4, 0, 0, 0], 0.2))
    w.add(3.0, cumulative([2, 0, 0, 0], 0.1))  # late: ignored
    w.add(5.0, cumulative([6, 0, 0, 0], 0.3))  # same instant: replaces
    assert w.quantiles(now=5.0).count == 6 and w.resets == 0
    with pytest.raises(ValueError):
        WindowedHistogram(window_s=0)


def test_windowed_rate() -> None:
    r = WindowedRate(window_s=10)
    assert r.rate() is None
    r.add(0.0, 100.0)
    assert r.rate() is None
    for t in range(1, 31):
        r.add(float(t), 100.0 + 10 * t + 5 * max(0, t - 20))  # 15/s after t=20
    assert r.span() == 10
    assert r.rate() == pytest.approx(15.0)  # only the last 10 s count
    assert r.rate(now=30.0) == pytest.approx(15.0)
    assert r.rate(now=100.0) is None  # stale
    r.add(101.0, float("nan"))  # ignored
    r.add(101.0, 5.0)  # reset: restart, never negative
    assert r.resets == 1 and r.rate() is None
    r.add(103.0, 25.0)
    assert r.rate() == pytest.approx(10.0)
    r.add(102.0, 30.0)  # late: ignored
    assert r.rate() == pytest.approx(10.0)


def test_a_lenient_parse_reads_around_bad_lines_and_counts_them() -> None:
    # Two pages run together (a second TYPE line for the same family), an author's "...",
    # a value that is no number: each line left out, named; every other sample read.
    text = ("# TYPE a gauge\na 1\n...\n# TYPE a counter\nb{x=\"1\"} one\nb{x=\"2\"} 2\n"
            + "!\n" * 10)
    skipped = Skipped(keep=3)
    fams = parse(text, skipped)
    assert [(s.name, s.value) for f in fams.values() for s in f.samples] == [("a", 1.0),
                                                                            ("b", 2.0)]
    assert skipped.count == 13 and [e.line_no for e in skipped.first] == [3, 4, 5]
    assert [e.reason for e in skipped.first] == [
        "invalid metric name", "second TYPE line for 'a' (gauge then counter)",
        "invalid value 'one'"]
    assert str(skipped).startswith("13 lines skipped: line 3: invalid metric name: '...'; ")
    assert str(skipped).endswith("; 10 more")
    with pytest.raises(PromTextError, match="line 3"):
        parse(text)  # without a place for them, the first bad line is an error, as before
