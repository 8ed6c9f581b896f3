"""Properties of the Kubernetes-shaped parsers: quantities, the bounded decoder, pods, pod
annotations and Nodes.

Each parser either returns its value or refuses with the ``ValueError`` it documents, for any
JSON-like input; what it returns is what the input says (quantities exactly, with Kubernetes'
rounding and ordering; decoded documents equal to what was encoded; a pod's or node's amounts
the sums of its quantities).
"""

from __future__ import annotations

import contextlib
import json
import math
from fractions import Fraction
from typing import Any

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from props import props
from qosmanager.api import decode
from qosmanager.api.node import NodeMeta, node_meta, parse_reservation
from qosmanager.api.pod import (
    ANNOTATION_BLKIO_QOS,
    ANNOTATION_CPU_BURST,
    ANNOTATION_EVICTION_POLICY,
    ANNOTATION_EVICTION_PRIORITY,
    ANNOTATION_MEMORY_QOS,
    ANNOTATION_RESOURCE_STATUS,
    KUBE_QOS_CLASSES,
    QOS_CLASSES,
    PodMeta,
    pod_list,
    pod_meta,
)
from qosmanager.api.quantity import milli_value, parse_quantity, value

# -- JSON-like values ----------------------------------------------------------------------------
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=12),
                    st.floats(allow_nan=False, allow_infinity=False))
json_values = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)), max_leaves=12)
# anything a YAML file can hand over, beyond JSON: NaN, infinities, non-string keys
yaml_like = st.recursive(st.one_of(scalars, st.sampled_from([math.nan, math.inf, -math.inf])),
                         lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                st.dictionaries(st.one_of(st.text(max_size=6), st.integers()),
                                                                kids, max_size=3)), max_leaves=10)

# -- quantities ----------------------------------------------------------------------------------
SUFFIXES = {"": 1, "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "k": 1000,
            "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20,
            "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def nano_ceil(x: Fraction) -> Fraction:
    """Kubernetes keeps nano precision, rounding a finer amount away from zero."""
    n = math.ceil(abs(x) * 10**9)
    return Fraction(n if x >= 0 else -n, 10**9)


@st.composite
def quantity_texts(draw: st.DrawFn) -> tuple[str, Fraction]:
    """A quantity in any of the wire forms and its exact amount, computed independently."""
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole = draw(st.integers(0, 10**12))
    frac_digits = draw(st.text("0123456789", max_size=12))
    form = draw(st.sampled_from(["int", "dot", "frac", "trailing-dot", "leading-dot"]))
    if form == "int" or (form in ("frac", "leading-dot") and not frac_digits):
        number, amount = str(whole), Fraction(whole)
    elif form == "trailing-dot":
        number, amount = f"{whole}.", Fraction(whole)
    elif form == "leading-dot":
        number, amount = f".{frac_digits}", Fraction(int(frac_digits), 10 ** len(frac_digits))
    else:
        number = f"{whole}.{frac_digits}"
        amount = whole + Fraction(int(frac_digits or "0"), 10 ** len(frac_digits))
    if draw(st.booleans()):
        suffix = draw(st.sampled_from(sorted(SUFFIXES)))
        amount *= SUFFIXES[suffix]
    else:
        exp = draw(st.integers(-30, 30))
        plus = draw(st.sampled_from(["", "+"])) if exp >= 0 else ""
        suffix = draw(st.sampled_from(["e", "E"])) + plus + str(exp)
        amount *= Fraction(10) ** exp
    amount = nano_ceil(amount)
    if suffix.endswith("i"):
        amount = min(amount, Fraction(2**63 - 1))  # upstream caps binary amounts at the largest int64
    return sign + number + suffix, -amount if sign == "-" else amount


@props(300)
@given(q=quantity_texts())
@example(q=("1Gi", Fraction(2**30)))
@example(q=("0.1", Fraction(1, 10)))
@example(q=("-1.5", Fraction(-3, 2)))
@example(q=("1E", Fraction(10**18)))
@example(q=("1n", Fraction(1, 10**9)))
@example(q=("0.5n", Fraction(1, 10**9)))
@example(q=("1024Ei", Fraction(2**63 - 1)))
@example(q=("-8Ei", Fraction(-(2**63 - 1))))
@example(q=("1e-311", Fraction(1, 10**9)))
@example(q=("-2.5e-400", Fraction(-1, 10**9)))
@example(q=("0e-400", Fraction(0)))
@example(q=("1E300", Fraction(10**300)))
def test_quantity_reads_every_wire_form_exactly(q: tuple[str, Fraction]) -> None:
    text, amount = q
    assert parse_quantity(text) == amount
    assert parse_quantity(f"  {text}\n") == amount  # surrounding blanks are ignored, as upstream
    # Value() and MilliValue(): the remaining fraction rounds away from zero
    for got, scaled in ((value(text), amount), (milli_value(text), amount * 1000)):
        assert got == (math.ceil(scaled) if scaled >= 0 else -math.ceil(-scaled))
    # the canonical nano form reads back the same
    nanos = amount * 10**9
    assert nanos.denominator == 1
    assert parse_quantity(f"{int(nanos)}n") == amount


@props(200)
@given(a=quantity_texts(), b=quantity_texts())
def test_quantities_compare_by_amount_whatever_their_form(a: tuple[str, Fraction],
                                                          b: tuple[str, Fraction]) -> None:
    """``1Gi`` > ``1G``, ``1000m`` == ``1``, ``0.5`` == ``500m``: Quantity.Cmp is by amount."""
    pa, pb = parse_quantity(a[0]), parse_quantity(b[0])
    assert (pa < pb) == (a[1] < b[1]) and (pa == pb) == (a[1] == b[1])
    assert parse_quantity(pa + pb) == a[1] + b[1]  # sums stay exact


@props(200)
@given(f=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15))
def test_quantity_of_a_json_number_is_its_decimal_text(f: float) -> None:
    """A JSON number is read by its text (``0.1`` is one tenth, not the float nearest to it)."""
    assert parse_quantity(f) == nano_ceil(Fraction(repr(f)))


@props(400)
@given(q=st.one_of(st.text(max_size=20),
                   st.text("0123456789.eE+-kKMGTPEimnu ", max_size=14),
                   json_values, yaml_like,
                   st.sampled_from(["1" * 5000, "1e301", "1e-301", "9" * 4400 + "Ei", "." * 3, "1..2", "+-1",
                                    "1 k", "1K", "1kk", "1Ki ", "\u0661", "1e", "e1", "Ki"])))
def test_quantity_refuses_only_with_its_value_error(q: Any) -> None:
    try:
        amount = parse_quantity(q)
    except ValueError as e:
        assert str(e).startswith("invalid quantity"), e
        return
    assert isinstance(amount, Fraction) and (amount * 10**9).denominator == 1


# -- the bounded decoder -------------------------------------------------------------------------
SMALL = decode.Limits(max_bytes=4096, max_depth=6, max_nodes=40)


def depth_and_nodes(v: Any) -> tuple[int, int]:
    """Nesting depth (a scalar: 0) and number of objects and lists of a decoded value."""
    if isinstance(v, dict):
        kids = [depth_and_nodes(x) for x in v.values()]
    elif isinstance(v, list):
        kids = [depth_and_nodes(x) for x in v]
    else:
        return 0, 0
    return 1 + max((d for d, _ in kids), default=0), 1 + sum(n for _, n in kids)


deep_json = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=5), kids, max_size=3)), max_leaves=40)


@props(300)
@given(v=deep_json)
def test_json_within_limits_decodes_to_itself_and_beyond_them_is_refused(v: Any) -> None:
    text = json.dumps(v)
    depth, nodes = depth_and_nodes(v)
    fits = depth <= SMALL.max_depth and nodes <= SMALL.max_nodes and len(text.encode()) <= SMALL.max_bytes
    try:
        got = decode.decode_json(text, SMALL, "x")
    except decode.DecodeError as e:
        assert not fits, e
        assert str(e).startswith("x: ")
        return
    assert fits and got == v


@props(300)
@given(text=st.one_of(st.text(max_size=60), st.binary(max_size=60),
                      st.text("[]{}\",:0123456789.eE-tfnaulrsNIy \\", max_size=40),
                      st.integers(1, 2000).map(lambda n: "[" * n + "]" * n),
                      st.integers(1, 200).map(lambda n: '{"a":' * n + "1" + "}" * n)))
@example(text="NaN")
@example(text="[1e400]")
@example(text="1" * 5000)
def test_decode_json_refuses_only_with_decode_error(text: str | bytes) -> None:
    try:
        v = decode.decode_json(text, SMALL)
    except decode.DecodeError:
        return
    depth, nodes = depth_and_nodes(v)
    assert depth <= SMALL.max_depth and nodes <= SMALL.max_nodes
    assert not any(isinstance(x, float) and not math.isfinite(x) for x in _leaves(v))


def _leaves(v: Any) -> list[Any]:
    if isinstance(v, dict):
        return [y for x in v.values() for y in _leaves(x)]
    if isinstance(v, list):
        return [y for x in v for y in _leaves(x)]
    return [v]


yaml_text = st.one_of(
    st.text(max_size=80),
    st.text("ab:- \n[]{},&*!'\"#|>?%@`0123456789.", max_size=60),
    deep_json.map(lambda v: yaml.safe_dump(v, default_flow_style=None)),
    st.integers(1, 12).map(lambda n: "a: &a [x, y]\n" + "".join(  # aliases of aliases: a billion laughs
        f"{b}: &{b} [*{a}, *{a}, *{a}]\n" for a, b in list(zip("abcdefghijkl", "bcdefghijklm"))[:n])),
    st.sampled_from(["!!python/object/apply:os.system ['true']", "? [a]\n: b", "a: !!binary 'AAA='",
                     "a: 2001-01-01", "{a: 1, a: 2}", "- " * 300 + "x", "&a [*a]", "a: " + "1" * 5000]),
)


@props(300)
@given(text=yaml_text)
def test_load_document_refuses_only_with_decode_error(text: str) -> None:
    try:
        v = decode.load_document(text, "doc", SMALL)
    except decode.DecodeError as e:
        assert str(e).startswith("doc: ")
        return
    depth, _ = depth_and_nodes(v)
    assert depth <= SMALL.max_depth


@props(200)
@given(v=st.one_of(st.dictionaries(st.text(max_size=5), deep_json, max_size=4),
                   st.lists(deep_json, max_size=4)))
def test_load_document_reads_back_what_yaml_and_json_wrote(v: Any) -> None:
    """Documents are objects (state files) or lists; a top-level JSON *string* goes to the YAML parser,
    which refuses JSON's surrogate-pair escapes (left alone: no document the agent reads is one)."""
    for text in (json.dumps(v), yaml.safe_dump(v)):
        try:
            got = decode.load_document(text, "doc", decode.DOCUMENT_LIMITS)
        except decode.DecodeError as e:  # only what is too deep for the document limits
            assert depth_and_nodes(v)[0] > decode.DOCUMENT_LIMITS.max_depth, e
            continue
        assert got == v


# -- pods ----------------------------------------------------------------------------------------
def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually the plausible value, sometimes any JSON value in its place."""
    return st.one_of(strategy, strategy, strategy, json_values)


quantity_values = st.one_of(st.sampled_from(["100m", "1", "2Gi", "0", "1.5", "512Mi", "-1", "1e3", 4, 0.5,
                                             "x", "", True, None]),
                            quantity_texts().map(lambda q: q[0]))
resource_lists = maybe(st.dictionaries(
    st.sampled_from(["cpu", "memory", "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory",
                     "kubernetes.io/mid-cpu", "ephemeral-storage"]), quantity_values, max_size=3))
containers = st.lists(maybe(st.fixed_dictionaries(
    {"name": maybe(st.sampled_from(["a", "b", "c"]))},
    optional={"resources": maybe(st.fixed_dictionaries({}, optional={"requests": resource_lists,
                                                                     "limits": resource_lists})),
              "restartPolicy": maybe(st.just("Always"))})), max_size=3)
annotation_texts = st.one_of(
    st.sampled_from(['{"enable": true}', '{"policy": "auto"}', '{"cpuBurstPercent": 300}', "null", "", "[]",
                     '{"blocks": [{"name": "sda", "type": "device", "ioCfg": {"readIOPS": 2048}}]}',
                     '{"cpuset": "0-3", "numaNodeResources": [{"node": 0, "resources": {"cpu": "2"}}]}',
                     '["LabelEvictionPolicy"]', "[null]", '{"Enable": "yes"}', "[" * 70 + "]" * 70, "7",
                     "-2147483649", "2147483647", "+5", '{"cpuset": 5}',
                     '{"numaNodeResources": [{"node": 1.5}]}',
                     '{"minLimitPercent": 101}', '{"blocks": [{"ioCfg": {"readBPS": -1}}]}']),
    json_values.map(json.dumps), st.text(max_size=20))
ANNOTATIONS = [ANNOTATION_CPU_BURST, ANNOTATION_MEMORY_QOS, ANNOTATION_BLKIO_QOS, ANNOTATION_RESOURCE_STATUS,
               ANNOTATION_EVICTION_POLICY, ANNOTATION_EVICTION_PRIORITY]
pods = st.fixed_dictionaries({
    "metadata": maybe(st.fixed_dictionaries(
        {"name": maybe(st.sampled_from(["p", "web-0"])),
         "uid": maybe(st.sampled_from(["0b9a5f1e-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "abc", "../x", "a/b", "-a",
                                       ""]))},
        optional={"namespace": maybe(st.sampled_from(["default", "ns"])),
                  "labels": maybe(st.dictionaries(st.sampled_from(
                      ["koordinator.sh/qosClass", "koordinator.sh/priority-class", "koordinator.sh/priority",
                       "koordinator.sh/eviction-enabled"]), maybe(st.sampled_from(
                           ["LS", "BE", "LSR", "koord-prod", "koord-batch", "9999", "x", "true"])),
                      max_size=3)),
                  "annotations": maybe(st.dictionaries(st.sampled_from(ANNOTATIONS), maybe(annotation_texts),
                                                       max_size=4)),
                  "resourceVersion": maybe(st.just("12"))})),
}, optional={
    "spec": maybe(st.fixed_dictionaries({}, optional={
        "containers": maybe(containers), "initContainers": maybe(containers), "overhead": resource_lists,
        "priority": maybe(st.sampled_from([0, 9500, 5500, 2**31, -1]))})),
    "status": maybe(st.fixed_dictionaries({}, optional={
        "phase": maybe(st.sampled_from(["Running", "Pending", "Succeeded"])),
        "qosClass": maybe(st.sampled_from(["Guaranteed", "Burstable", "BestEffort", "Other"])),
        "containerStatuses": maybe(st.lists(maybe(st.fixed_dictionaries(
            {"name": maybe(st.sampled_from(["a", "b"]))},
            optional={"containerID": maybe(st.just("containerd://abc")),
                      "state": maybe(st.just({"running": {}}))})), max_size=2))})),
})


@props(200)
@given(obj=st.one_of(pods, json_values))
@example(obj={"metadata": {"name": "p", "uid": "u1"}, "status": {"qosClass": ["Guaranteed"]}})
@example(obj={"metadata": {"name": "p", "uid": "u1"}, "status": {"qosClass": {"a": 1}}})
def test_pod_is_a_view_or_a_clear_refusal(obj: Any) -> None:
    try:
        pod = pod_meta(obj)
    except ValueError as e:
        assert str(e), "a refusal says why"
        return
    assert isinstance(pod, PodMeta)
    assert pod.qos in QOS_CLASSES and pod.kube_qos in KUBE_QOS_CLASSES
    assert pod.cpu_request_milli >= -(2**70) and isinstance(pod.memory_limit, int)
    # a feature's annotation that cannot be used is flagged and explained, never half-applied
    for flag, config, key in ((pod.cpu_burst_invalid, pod.cpu_burst, ANNOTATION_CPU_BURST),
                              (pod.memory_qos_invalid, pod.memory_qos, ANNOTATION_MEMORY_QOS),
                              (pod.blkio_qos_invalid, pod.blkio_qos, ANNOTATION_BLKIO_QOS)):
        if flag:
            assert config is None and any(w.startswith(f"annotation {key}: ") for w in pod.warnings)
    if pod.eviction_policy_invalid:
        assert pod.eviction_policy == ()


@props(100)
@given(items=st.lists(st.one_of(pods, json_values), max_size=6))
def test_one_bad_pod_never_loses_the_others(items: list[Any]) -> None:
    pods_, errors = pod_list({"kind": "PodList", "items": items})
    good = []
    for item in items:
        with contextlib.suppress(ValueError):
            good.append(pod_meta(item).uid)
    first = list(dict.fromkeys(good))
    assert [p.uid for p in pods_] == first
    assert len(pods_) + len(errors) == len(items)


# -- Node ----------------------------------------------------------------------------------------
nodes = st.fixed_dictionaries({
    "metadata": maybe(st.fixed_dictionaries({"name": maybe(st.just("n1"))}, optional={
        "annotations": maybe(st.fixed_dictionaries({}, optional={"node.koordinator.sh/reservation": maybe(
            st.one_of(st.sampled_from(['{"resources": {"cpu": "2", "memory": "1Gi"}}',
                                       '{"reservedCPUs": "0-1"}',
                                       '{"reservedCPUs": "3-1"}', '{"reservedCPUs": 7}', "[]", "{", "",
                                       '{"resources": {"cpu": "x"}}', '{"ReservedCpus": "0,2"}']),
                      json_values.map(json.dumps)))}))})),
    "status": maybe(st.fixed_dictionaries({}, optional={"capacity": resource_lists,
                                                        "allocatable": resource_lists})),
}, optional={"kind": maybe(st.just("Node"))})


@props(150)
@given(obj=st.one_of(nodes, json_values))
@example(obj={"status": {"capacity": {"cpu": "4", "memory": "8Gi"}}})
def test_node_is_a_view_or_a_clear_refusal(obj: Any) -> None:
    try:
        node = node_meta(obj)
    except ValueError as e:
        assert str(e)
        return
    assert isinstance(node, NodeMeta)
    cap = obj["status"]["capacity"]
    assert node.cpu_capacity_milli == milli_value(cap["cpu"]) > 0
    assert node.memory_capacity == value(cap["memory"]) >= 2**20
    assert node.cpu_capacity_cores * 1000 >= node.cpu_capacity_milli > (node.cpu_capacity_cores - 1) * 1000
    assert node.reserved_cpu_milli >= 0 and node.reserved_memory >= 0
    assert node.reserved_cpu_ids == tuple(sorted(set(node.reserved_cpu_ids)))


@props(200)
@given(text=st.one_of(st.none(), st.text(max_size=30), json_values.map(json.dumps), st.fixed_dictionaries(
    {}, optional={"resources": resource_lists,
                  "reservedCPUs": maybe(st.sampled_from(["0-3", "1,3", "", "x"]))}
).map(json.dumps)))
def test_node_reservation_is_read_or_refused(text: str | None) -> None:
    try:
        r = parse_reservation(text)
    except ValueError:
        return
    if r.reserved_cpus:
        assert r.cpu_milli == 1000 * len(r.reserved_cpu_ids)


@pytest.mark.parametrize("bad", [["Guaranteed"], {"x": 1}])
def test_a_status_qos_class_of_the_wrong_type_is_recomputed(bad: Any) -> None:
    pod = pod_meta({"metadata": {"name": "p", "uid": "u1"}, "status": {"qosClass": bad}})
    assert pod.kube_qos == "BestEffort"
    assert any("qosClass" in w for w in pod.warnings)


# -- what a strategy does with a pod whose annotation cannot be decoded (strategies/_annotations.py) --
class AuditSink:
    """The one Context method InvalidAnnotations calls."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, str, str | None]] = []

    def audit_skip(self, strategy: str, target: str, reason: str, *, uid: str | None = None) -> None:
        self.records.append((strategy, target, reason, uid))


UIDS = ["u1", "u2", "u3"]
BLKIO_TEXTS = [None, '{"blocks": []}', '{"blocks": [{"ioCfg": {"readIOPS": -1}}]}', "{", '{"blocks": 3}',
               "[]"]


@props(150)
@given(steps=st.lists(st.dictionaries(st.sampled_from(UIDS), st.sampled_from(BLKIO_TEXTS), max_size=3),
                      min_size=1, max_size=8))
def test_an_undecodable_annotation_is_audited_once_per_pod_and_text(
        steps: list[dict[str, str | None]]) -> None:
    """Tick after tick (each step: the pods present and their blkio annotation), every pod whose annotation
    cannot be decoded is skipped with one audit naming it and why, the first time its text is seen; a pod
    that leaves, or whose annotation becomes fine, is audited again when it is bad again."""
    from qosmanager.strategies._annotations import InvalidAnnotations

    sink = AuditSink()
    inv = InvalidAnnotations("blkioReconcile", ANNOTATION_BLKIO_QOS, "blkio files")
    audited: dict[str, str | None] = {}  # the model: uid -> text last audited while still bad
    expected = 0
    for step in steps:
        pods_now = {}
        for uid, text in step.items():
            ann = {} if text is None else {ANNOTATION_BLKIO_QOS: text}
            pods_now[uid] = pod_meta({"metadata": {"name": uid, "uid": uid, "annotations": ann}})
        for uid, pod in pods_now.items():
            if pod.blkio_qos_invalid:
                if audited.get(uid, ...) != pod.annotations[ANNOTATION_BLKIO_QOS]:
                    expected += 1
                    audited[uid] = pod.annotations[ANNOTATION_BLKIO_QOS]
                before = len(sink.records)
                inv.skip(sink, pod)  # type: ignore[arg-type]
                for rec in sink.records[before:]:
                    assert rec[0] == "blkioReconcile" and rec[1] == pod.key and rec[3] == uid
                    assert ANNOTATION_BLKIO_QOS in rec[2] and "left as they are" in rec[2]
        inv.forget_gone(pods_now)
        for uid in list(audited):
            if uid not in pods_now or not pods_now[uid].blkio_qos_invalid:
                del audited[uid]
        assert len(sink.records) == expected
