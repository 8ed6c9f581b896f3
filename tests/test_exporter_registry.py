"""The exporter's registry: both exposition formats, their negotiation, escaping, histogram math,
pulled values.

Expected texts and numbers are written out by hand from the formats' rules; the output is parsed
back with the readers in ``promtext.py`` (a strict reader of the text format and
``prometheus_client``'s own text and OpenMetrics parsers).
"""

from __future__ import annotations

import math
import os
import resource
import threading
from pathlib import Path
from typing import Any

import prometheus_client
import pytest

from promtext import FormatError, buckets, parse, parse_openmetrics
from qosmanager.exporter.registry import (
    CONTENT_TYPE,
    OPENMETRICS_CONTENT_TYPE,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    Registry,
    accepts_gzip,
    exponential_buckets,
    wants_openmetrics,
)

PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                     "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")  # what Prometheus 2.x sends


def openmetrics(r: Registry) -> str:
    page, ctype = r.expose(PROMETHEUS_ACCEPT)
    assert ctype == OPENMETRICS_CONTENT_TYPE
    return page.decode()


def test_counter_and_gauge_render_exactly() -> None:
    r = Registry()
    c = Counter("jobs_total", "Jobs done", ("kind",), r)
    g = Gauge("temperature", "Now", registry=r)
    c.labels("b").inc()
    c.labels("a").inc(2.5)
    c.labels("b").inc(2)
    g.set(-1.25)
    assert r.render() == (
        "# HELP jobs_total Jobs done\n"
        "# TYPE jobs_total counter\n"
        'jobs_total{kind="a"} 2.5\n'
        'jobs_total{kind="b"} 3.0\n'
        "# HELP temperature Now\n"
        "# TYPE temperature gauge\n"
        "temperature -1.25\n"
    )
    # OpenMetrics names the counter family without _total, its samples with it, and ends in # EOF
    assert openmetrics(r) == (
        "# HELP jobs Jobs done\n"
        "# TYPE jobs counter\n"
        'jobs_total{kind="a"} 2.5\n'
        'jobs_total{kind="b"} 3.0\n'
        "# HELP temperature Now\n"
        "# TYPE temperature gauge\n"
        "temperature -1.25\n"
        "# EOF\n"
    )
    assert r.expose("") == (r.render().encode(), CONTENT_TYPE)


def test_a_counter_without_total_keeps_its_exact_name_in_both_formats() -> None:
    """koordlet's ``koordlet_pod_eviction`` (client_golang's text format adds no suffix): as a counter
    both formats would call its samples ``koordlet_pod_eviction_total`` and koordlet's dashboards
    would find nothing, so it is exposed untyped under its own name."""
    r = Registry()
    Counter("koordlet_pod_eviction", "Evictions", ("node", "reason"), r).labels("n1", "BECPUEvict").inc()
    text = r.render()
    assert "# TYPE koordlet_pod_eviction untyped\n" in text
    assert 'koordlet_pod_eviction{node="n1",reason="BECPUEvict"} 1.0\n' in text
    for fams in (parse(text), parse_openmetrics(openmetrics(r))):
        assert fams["koordlet_pod_eviction"].value(node="n1", reason="BECPUEvict") == 1
        assert "koordlet_pod_eviction_total" not in fams


def test_escaping_round_trips_through_the_reader() -> None:
    nasty = 'C:\\dir "quoted"\nsecond line'
    r = Registry()
    g = Gauge("odd_labels", 'Help with \\ and\nnewline and "quotes"', ("path", "other"), r)
    g.labels(nasty, "").set(1)
    g.labels("plain", "ünïcode").set(2)
    text = r.render()
    # label values escape backslash, quote and line feed; HELP only backslash and line feed
    assert 'odd_labels{other="",path="C:\\\\dir \\"quoted\\"\\nsecond line"} 1.0\n' in text
    assert '# HELP odd_labels Help with \\\\ and\\nnewline and "quotes"\n' in text
    for fams in (parse(text), parse_openmetrics(openmetrics(r))):
        fam = fams["odd_labels"]
        assert fam.value(path=nasty, other="") == 1
        assert fam.value(path="plain", other="ünïcode") == 2
    assert parse(text)["odd_labels"].help == 'Help with \\ and\nnewline and "quotes"'


@pytest.mark.parametrize(("value", "text"), [
    (3, "3.0"), (0.1, "0.1"), (-2.5, "-2.5"), (1e-7, "1e-07"), (2.0**60, "1.152921504606847e+18"),
    (math.inf, "+Inf"), (-math.inf, "-Inf"), (math.nan, "NaN"), (True, "1.0"),
])
def test_values_as_go_reads_them(value: float, text: str) -> None:
    r = Registry()
    Gauge("v", "x", registry=r).set(value)
    assert r.render().endswith(f"\nv {text}\n")
    for fams in (parse(r.render()), parse_openmetrics(openmetrics(r))):
        got = fams["v"].value()
        assert (math.isnan(got) and math.isnan(value)) or got == value


def test_histogram_math_by_hand() -> None:
    r = Registry()
    h = Histogram("latency_seconds", "How long", ("op",), buckets=[5, 1, 2], registry=r)  # unsorted
    child = h.labels("read")
    for v in (0.5, 1, 1.5, 2, 4.9, 5, 7, 100):
        child.observe(v)
    child.observe(3, n=3)  # three equal samples in one update
    child.observe(math.nan)  # dropped: it would poison the sum
    for fams in (parse(r.render()), parse_openmetrics(openmetrics(r))):
        fam = fams["latency_seconds"]
        # le=1: 0.5, 1 (a sample equal to a bound counts in it) -> 2
        # le=2: + 1.5, 2 -> 4;  le=5: + 4.9, 5, 3 x 3 -> 9;  +Inf: + 7, 100 -> 11
        assert buckets(fam, op="read") == [(1.0, 2), (2.0, 4), (5.0, 9), (math.inf, 11)]
        assert fam.series("_count") == {(("op", "read"),): 11}
        # 0.5 + 1 + 1.5 + 2 + 4.9 + 5 + 7 + 100 + 9 = 130.9
        assert fam.series("_sum")[(("op", "read"),)] == pytest.approx(130.9)


def test_histogram_text_layout() -> None:
    r = Registry()
    h = Histogram("d_ms", "x", buckets=(0.5,), registry=r)
    h.observe(0.25)
    assert r.render() == (
        "# HELP d_ms x\n# TYPE d_ms histogram\n"
        'd_ms_bucket{le="0.5"} 1.0\nd_ms_bucket{le="+Inf"} 1.0\nd_ms_count 1.0\nd_ms_sum 0.25\n'
    )


def test_koordlets_exponential_buckets() -> None:
    # ExponentialBuckets(0.01, 4, 8): 0.01 x 4^i, written out by hand
    assert exponential_buckets(0.01, 4, 8) == (0.01, 0.04, 0.16, 0.64, 2.56, 10.24, 40.96, 163.84)
    r = Registry()
    Histogram("b", "x", buckets=exponential_buckets(0.01, 4, 8), registry=r).observe(1)
    assert 'b_bucket{le="0.16"} 0.0' in r.render()  # not 0.16000000000000003
    with pytest.raises(ValueError, match="factor > 1"):
        exponential_buckets(1, 1, 3)


def test_pulled_values_are_read_at_scrape_time_and_a_broken_reader_loses_only_its_family() -> None:
    r = Registry()
    state = {"n": 1}
    Counter("pulled_total", "From a stats object", registry=r).pull(lambda: state["n"])
    Gauge("by_kind", "Mapping", ("kind", "node"), r).pull(lambda: {("b", "n1"): 2, ("a", "n1"): 1})
    Gauge("single_label", "str keys", ("kind",), r).pull(lambda: {"x": 4})

    def broken() -> float:
        raise RuntimeError("boom")

    Gauge("broken", "Raises", registry=r).pull(broken)
    Gauge("absent", "None", registry=r).pull(lambda: None)
    state["n"] = 7
    fams = parse(r.render())
    assert fams["pulled_total"].value() == 7
    assert fams["by_kind"].value(kind="a", node="n1") == 1 and fams["by_kind"].value(kind="b", node="n1") == 2
    assert fams["single_label"].value(kind="x") == 4
    assert fams["broken"].samples == {} and fams["absent"].samples == {}


def test_bad_names_and_uses_are_refused_with_a_clear_message() -> None:
    r = Registry()
    with pytest.raises(ValueError, match="invalid metric name"):
        Counter("1bad", "x")
    with pytest.raises(ValueError, match="invalid label name"):
        Counter("ok", "x", ("bad-label",))
    with pytest.raises(ValueError, match="invalid label name"):
        Counter("ok", "x", ("__reserved",))
    with pytest.raises(ValueError, match="reserved"):
        Histogram("h", "x", ("le",), buckets=(1,))
    with pytest.raises(ValueError, match="distinct finite"):
        Histogram("h", "x", buckets=(1, 1))
    c = Counter("c_total", "x", ("a",), r)
    with pytest.raises(ValueError, match="registered twice"):
        Counter("c_total", "x", registry=r)
    ProcessCollector(registry=r)  # prometheus_client's registry refuses a clash with its collectors too
    with pytest.raises(ValueError, match="Duplicated"):
        Gauge("process_open_fds", "x", registry=r)
    with pytest.raises(ValueError, match="takes labels"):
        c.labels("a", "b")
    with pytest.raises(ValueError, match="only goes up"):
        c.labels("a").inc(-1)


def test_remove_drops_a_series() -> None:
    r = Registry()
    g = Gauge("g", "x", ("t",), r)
    g.labels("cpuset").set(3)
    g.labels("cfsQuota").set(2.7)
    g.remove("cfsQuota")
    g.remove("never-there")
    assert parse(r.render())["g"].series() == {(("t", "cpuset"),): 3}


def test_the_reader_catches_broken_text() -> None:
    """The reader must be able to fail, or the format tests prove nothing."""
    ok = "# HELP a_total x\n# TYPE a_total counter\na_total 1\n"
    parse(ok)
    for bad in (
        "# TYPE a counter\na 1\n",  # no HELP
        "# HELP a x\n# TYPE a counter\na 1",  # no final line feed
        "# HELP a x\n# TYPE a counter\na -1\n",  # a negative counter
        '# HELP a x\n# TYPE a gauge\na{l="\\t"} 1\n',  # an escape the format does not have
        "# HELP a x\n# TYPE a gauge\na 1\na 2\n",  # the same series twice
        "# HELP a x\n# TYPE a gauge\nb 1\n",  # a sample outside its family
        '# HELP h x\n# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n',
        '# HELP h x\n# TYPE h histogram\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 1\n',
    ):
        with pytest.raises(FormatError):
            parse(bad)
    parse_openmetrics("# TYPE a counter\na_total 1\n# EOF\n")
    for bad in ("# TYPE a counter\na_total 1\n", "# TYPE a counter\na 1\n# EOF\n"):  # no EOF; no _total
        with pytest.raises(FormatError):
            parse_openmetrics(bad)


@pytest.mark.parametrize(("accept", "want"), [
    (PROMETHEUS_ACCEPT, True),
    ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;"
     "version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,"
     "*/*;q=0.1", True),  # Prometheus 3
    ("application/openmetrics-text", True),
    ("application/openmetrics-text; version=0.0.1", True),
    ("text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0", True),  # q orders
    ("application/openmetrics-text;version=1.0.0;q=0.4,text/plain;version=0.0.4;q=0.5", False),
    ("application/openmetrics-text;q=0,*/*", False),  # q=0 refuses it
    ("application/openmetrics-text;version=9.9.9,text/plain", False),  # a version it does not write
    ("text/plain", False), ("*/*", False), ("", False), ("garbage;;;,,", False),
])
def test_format_negotiation(accept: str, want: bool) -> None:
    assert wants_openmetrics(accept) is want


@pytest.mark.parametrize(("header", "want"), [
    ("gzip", True), ("gzip, deflate, br", True), ("deflate, GZIP;q=0.5", True), ("x-gzip", True),
    ("identity", False), ("", False), ("gzip;q=0", False), ("*", False), ("br;q=1.0, gzip;q=0", False),
])
def test_gzip_negotiation(header: str, want: bool) -> None:
    assert accepts_gzip(header) is want


def test_scrapes_never_race_updates() -> None:
    """New label sets appear while another thread renders: no 'dict changed size', no torn histogram."""
    r = Registry()
    c = Counter("events_total", "x", ("k",), r)
    h = Histogram("obs", "x", ("k",), buckets=(1, 10), registry=r)
    stop = threading.Event()
    errors: list[BaseException] = []

    def scrape() -> None:
        try:
            while not stop.is_set():
                parse(r.render())  # histogram invariants are checked on every page
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=scrape)
    t.start()
    try:
        for i in range(3000):
            c.labels(str(i % 700)).inc()
            h.labels(str(i % 300)).observe(i % 13)
    finally:
        stop.set()
        t.join()
    assert errors == []
    fams = parse(r.render())
    assert sum(fams["events_total"].series().values()) == 3000
    assert sum(fams["obs"].series("_count").values()) == 3000


def _families(collector: Any) -> dict[str, Any]:
    return {m.name: m for m in collector.collect()}


def test_process_families_are_the_librarys_with_descriptors_counted_without_listing(tmp_path: Path) -> None:
    """Same names, types and help as prometheus_client's ProcessCollector, and the same values
    (CPU and memory move between the two reads: they are compared loosely)."""
    ours = _families(ProcessCollector(registry=None))
    theirs = _families(prometheus_client.ProcessCollector(registry=None))
    assert {(m.name, m.type, m.documentation) for m in ours.values()} == {
        (m.name, m.type, m.documentation) for m in theirs.values()}
    assert set(ours) == {"process_virtual_memory_bytes", "process_resident_memory_bytes",
                         "process_start_time_seconds", "process_cpu_seconds", "process_open_fds",
                         "process_max_fds"}

    def value(fams: dict[str, Any], name: str) -> float:
        return float(fams[name].samples[0].value)

    for name in ("process_start_time_seconds", "process_max_fds"):
        assert value(ours, name) == value(theirs, name), name
    assert value(ours, "process_resident_memory_bytes") == pytest.approx(
        value(theirs, "process_resident_memory_bytes"), rel=0.2)
    # the library's listing counts its own descriptor of /proc/self/fd
    assert value(theirs, "process_open_fds") - 1 == value(ours, "process_open_fds")
    extra = [os.open(os.devnull, os.O_RDONLY) for _ in range(100)]
    try:
        assert value(_families(ProcessCollector(registry=None)), "process_open_fds") == (
            value(ours, "process_open_fds") + 100)
    finally:
        for fd in extra:
            os.close(fd)


def test_process_descriptors_are_listed_where_the_directory_gives_no_count(tmp_path: Path) -> None:
    """A /proc that is not the kernel's (or a kernel before 6.2, whose fd directory has size 0):
    the descriptors are listed.  A fake /proc: boot time, the process's stat, limits, and 3 fds."""
    (tmp_path / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    me = tmp_path / "42"
    (me / "fd").mkdir(parents=True)
    for i in range(4):  # 0, 1, 2 and the descriptor the listing itself holds on a real /proc
        (me / "fd" / str(i)).write_text("")
    # pid (comm with a paren) state ppid ... utime=field 14, stime=15, starttime=22, vsize=23, rss=24
    fields = ["S"] + ["0"] * 10 + ["250", "150"] + ["0"] * 6 + ["500", "4096000", "10"]
    (me / "stat").write_text("42 (odd) name) " + " ".join(fields) + " 0 0\n")
    (me / "limits").write_text("Limit  Soft Limit  Hard Limit  Units\nMax open files  1024  4096  files\n")
    c = ProcessCollector(pid=lambda: 42, proc=str(tmp_path), registry=None)
    fams = {m.name: float(m.samples[0].value) for m in c.collect()}
    ticks = os.sysconf("SC_CLK_TCK")
    assert fams == {"process_virtual_memory_bytes": 4096000.0,
                    "process_resident_memory_bytes": 10.0 * resource.getpagesize(),
                    "process_start_time_seconds": 500 / ticks + 1700000000,
                    "process_cpu_seconds": (250 + 150) / ticks,  # a counter family: _total on its sample
                    "process_open_fds": 3.0, "process_max_fds": 1024.0}
    (me / "stat").write_text("garbled")
    assert {m.name for m in c.collect()} == {"process_open_fds", "process_max_fds"}  # the rest still read


def test_the_text_page_is_the_librarys_own_encoders_page(tmp_path: Path) -> None:
    """The text format 0.0.4 is written without ``prometheus_client.exposition`` (which would load
    TLS, urllib and the HTTP server): page for page what that module's encoder writes, for every kind
    of family, nasty label values and help, the untyped koordlet counter and the standard collectors
    (the process families on a fixed fake /proc and no garbage collection between the two pages: the
    live CPU time and GC counts move between two renders)."""
    import gc

    from prometheus_client.exposition import generate_latest
    from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

    from qosmanager.exporter.promlib import GCCollector, PlatformCollector

    r = Registry()
    c = Counter("jobs_total", "Jobs\\ done\nby kind", ("kind",), r)
    c.labels('a "b"\\\n').inc(2.5)
    c.labels("ünï").inc()
    Counter("koordlet_pod_eviction", "Evictions", ("node", "reason"), r).labels("n1", "BECPUEvict").inc()
    Gauge("temperature", "Now", registry=r).set(-1.25)
    h = Histogram("latency_seconds", "Latency", ("op",), buckets=exponential_buckets(0.001, 2, 5), registry=r)
    for v in (0.0005, 0.003, 0.1, math.inf):
        h.labels("read").observe(v)
    (tmp_path / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    me = tmp_path / "42"
    (me / "fd").mkdir(parents=True)
    (me / "stat").write_text("42 (agent) " + " ".join(["S"] + ["0"] * 10 + ["250", "150"] + ["0"] * 6
                                                      + ["500", "4096000", "10"]) + " 0 0\n")
    (me / "limits").write_text("Limit  Soft Limit  Hard Limit  Units\nMax open files  1024  4096  files\n")
    ProcessCollector(pid=lambda: 42, proc=str(tmp_path), registry=r)
    PlatformCollector(registry=r)
    GCCollector(registry=r)

    class Extra:  # a created timestamp (OpenMetrics-only samples), an info family, timestamps
        def collect(self) -> list[Any]:
            cf = CounterMetricFamily("extra_requests", "Requests", labels=["x"], created=1_700_000_000.5)
            cf.add_metric(["1"], 3, created=1_700_000_000.5, timestamp=1_700_000_001.25)
            gf = GaugeMetricFamily("extra_level", "Level", value=7)
            info = InfoMetricFamily("extra_build", "Build", value={"version": "1.2"})
            return [cf, gf, info]

    r.register(Extra())  # type: ignore[arg-type]
    enabled = gc.isenabled()
    gc.disable()
    try:
        page, ctype = r.expose("")
        library = generate_latest(r)
    finally:
        if enabled:
            gc.enable()
    assert page == library
    assert ctype == "text/plain; version=0.0.4; charset=utf-8"
    assert b"extra_requests_created" in page and b"process_cpu_seconds_total" in page


def test_the_exporter_loads_no_tls_urllib_or_http_server_and_the_full_library_still_imports() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import qosmanager.exporter.agent_metrics, qosmanager.exporter.server\n"
        "heavy = ['ssl', '_hashlib', 'urllib.request', 'http.server', 'wsgiref', 'email', 'prometheus_client']\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "import prometheus_client\n"
        "from qosmanager.exporter.registry import Registry\n"
        "assert issubclass(Registry, prometheus_client.CollectorRegistry)\n"
        "assert prometheus_client.generate_latest(Registry()) == b''\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "ok"]
