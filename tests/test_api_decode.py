"""Bounded decoding: no text, however nested or large, gets past the decoder as anything but a
DecodeError (a ValueError) naming what was wrong; Go's key matching."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from qosmanager.api.decode import (
    ANNOTATION_LIMITS,
    DOCUMENT_LIMITS,
    DecodeError,
    Limits,
    _loads_in_windows,
    _nesting_large,
    _nesting_small,
    decode_json,
    fold_get,
    go_fold,
    load_document,
    load_object,
    read_document_file,
)
from qosmanager.api.nodeslo import parse_nodeslo


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_the_annotation_that_killed_the_agent_is_a_clear_error() -> None:
    with pytest.raises(DecodeError, match=r"^nested deeper than 64 levels$"):
        decode_json(nested(1000))
    with pytest.raises(DecodeError, match="nested deeper than 64 levels"):
        decode_json('{"a": ' * 5000 + "1" + "}" * 5000)


def test_depth_limit_is_exact_and_brackets_in_strings_do_not_count() -> None:
    assert decode_json(nested(64)) is not None
    with pytest.raises(DecodeError, match="deeper than 64"):
        decode_json(nested(65))
    inner = json.dumps("[" * 500 + "{" * 500 + '\\"]')
    assert decode_json(f"[{inner}]") == [json.loads(inner)]
    # unbalanced or unclosed text is the parser's business, and never a RecursionError
    for text in ("[" * 100_000, "[" * 3000 + "]", '{"a": [' * 2000):
        with pytest.raises(DecodeError):
            decode_json(text, Limits(1 << 20, 64, 1 << 20))


def test_go_json_grammar_and_the_size_limit() -> None:
    for text in ('{"a": NaN}', "[Infinity]", "[-Infinity]", "[1e400]", "{'a': 1}", "", "[1,]"):
        with pytest.raises(DecodeError, match="not valid JSON"):
            decode_json(text)
    assert decode_json('{"a": 1.5, "b": null}') == {"a": 1.5, "b": None}
    big = json.dumps(["x" * 1000] * 300)  # 300 KB > 256 KiB
    with pytest.raises(DecodeError, match=r"^\d+ bytes, more than the limit of 256 KiB$"):
        decode_json(big)
    assert decode_json(big, DOCUMENT_LIMITS) == ["x" * 1000] * 300
    with pytest.raises(DecodeError, match="more than 65536 objects and lists"):
        decode_json("[" + ",".join(["[]"] * 70_000) + "]")


def test_small_and_large_nesting_checks_agree_with_the_parsed_data() -> None:
    rng = random.Random(7)

    def gen(d: int) -> Any:
        if d == 0:
            return rng.choice([1, "a[b{", 'x\\"]]', None, "\\\\", "'['"])
        items = [gen(d - 1) for _ in range(rng.randrange(0, 4))]
        return items if rng.random() < 0.5 else {f'k{i}"[': v for i, v in enumerate(items)}

    def measure(o: Any) -> tuple[int, int]:
        if isinstance(o, (dict, list)):
            kids = [measure(v) for v in (o.values() if isinstance(o, dict) else o)]
            return 1 + max((k[0] for k in kids), default=0), 1 + sum(k[1] for k in kids)
        return 0, 0

    for _ in range(300):
        obj = gen(rng.randrange(0, 8))
        data = json.dumps(obj).encode()
        assert _nesting_small(data) == _nesting_large(data) == measure(obj)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_the_chunked_check_agrees_wherever_a_chunk_ends(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Chunks as small as one byte: runs of backslashes and escaped quotes across every boundary."""
    import qosmanager.api.decode as decode

    monkeypatch.setattr(decode, "_CHUNK", chunk)
    rng = random.Random(chunk)
    for _ in range(200):
        parts = [rng.choice(['"', "\\", '\\"', "[", "]", "{", "}", "a", '\\\\"']) for _ in range(rng.randrange(1, 12))]
        obj = [{"k" + "".join(parts): ["".join(reversed(parts)), [[]]]}, "".join(parts)]
        data = json.dumps(obj).encode()
        assert _nesting_large(data) == _nesting_small(data) == (5, 5)


def test_large_documents_are_checked_too() -> None:
    filler = json.dumps({"pad": "x" * (1 << 20)})  # beyond the small path
    deep = "[" + filler + "," + nested(101) + "]"
    with pytest.raises(DecodeError, match="doc: nested deeper than 100 levels"):
        load_document(deep, "doc")
    ok = "[" + filler + "," + nested(99) + "]"
    assert load_document(ok, "doc")[0] == json.loads(filler)
    with pytest.raises(DecodeError, match="more than 10 objects and lists"):
        load_document("[" + ",".join(["[]"] * 11) + "]", "doc", Limits(1 << 20, 10, 10))


def _doc(rng: random.Random) -> Any:
    """A document shaped like a pod list, with what could trip a window: multi-byte and escaped
    characters (a lone surrogate too), numbers and literals of every length, nesting, white space."""
    def scalar() -> Any:
        return rng.choice([0, -7, 123456789012345678901234567890, 1.5e-300, 3.25, True, False, None, "",
                           "é€😀", "\\ud800", "a\"b\\c\n", "x" * rng.randrange(0, 40), "ü" * rng.randrange(0, 9)])

    def value(d: int) -> Any:
        if d == 0 or rng.random() < 0.3:
            return scalar()
        if rng.random() < 0.5:
            return [value(d - 1) for _ in range(rng.randrange(0, 4))]
        return {rng.choice(["metadata", "spec", "status", "k€", "name", "é"]): value(d - 1)
                for _ in range(rng.randrange(0, 4))}

    items = [{"metadata": {"uid": f"u{i}", "name": "p€" * rng.randrange(0, 3)}, "spec": value(3),
              "status": value(2)} if rng.random() < 0.8 else value(2) for i in range(rng.randrange(0, 30))]
    top: Any = {"kind": "PodList", "items": items, "metadata": {"resourceVersion": "1"}, "n": scalar(),
                "more": [scalar() for _ in range(rng.randrange(0, 5))]}
    return items if rng.random() < 0.2 else top


def _dump(obj: Any, rng: random.Random) -> bytes:
    ws = rng.choice([None, 0, 2])
    text = json.dumps(obj, ensure_ascii=rng.random() < 0.3, indent=ws,
                      separators=(",", ":") if ws is None and rng.random() < 0.5 else None)
    return (rng.choice(["", " ", "\n\t "]) + text + rng.choice(["", "\n", " \r\n "])).encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("window", [1, 2, 3, 5, 16, 100, 1 << 20])
def test_windowed_decoding_is_json_loads(monkeypatch: pytest.MonkeyPatch, window: int) -> None:
    """A long document is decoded from windows of its text; whatever the window, wherever it ends
    (inside a character, a string, a number, white space), the result is ``json.loads``'s, with the
    pods' object hook too."""
    import qosmanager.api.decode as decode
    from qosmanager.api.pod import PrunedPod, prune_pod_hook

    monkeypatch.setattr(decode, "_WINDOW", window)
    rng = random.Random(window)
    for _ in range(60):
        data = _dump(_doc(rng), rng)
        assert _loads_in_windows(data, None) == json.loads(data)
        hooked = _loads_in_windows(data, prune_pod_hook)
        want = json.loads(data, object_hook=prune_pod_hook)
        assert hooked == want
        items = hooked["items"] if isinstance(hooked, dict) else hooked
        assert any(isinstance(x, PrunedPod) for x in items) == any(isinstance(x, PrunedPod) for x in
                                                                     (want["items"] if isinstance(want, dict)
                                                                      else want))


@pytest.mark.parametrize("text", [
    '{"items": [1, 2,]}', '{"items": [1 2]}', '{"a": 1,}', '{"a" 1}', '{"a": 1} x', '[1, 2] [', '{"a": "\x01"}',
    '{"a": NaN, "items": [Infinity]}', '{"a": [1, {"b": 2}]', '{"a": "unterminated', '{"a": 1, "a": 2}',
    '[' + "1" * 5000 + ']', '{"items": [tru]}', '{"é": "\\udc00"}',
])
@pytest.mark.parametrize("window", [1, 4, 1 << 20])
def test_windowed_decoding_fails_and_accepts_as_json_loads(monkeypatch: pytest.MonkeyPatch, text: str,
                                                           window: int) -> None:
    import qosmanager.api.decode as decode

    monkeypatch.setattr(decode, "_WINDOW", window)
    data = text.encode("utf-8", "surrogatepass")
    try:
        want: Any = json.loads(data)
    except ValueError as e:
        with pytest.raises(type(e)) as got:
            _loads_in_windows(data, None)
        assert str(got.value) == str(e)
    else:
        assert _loads_in_windows(data, None) == want


def test_a_long_pod_list_is_never_one_string_beside_its_bytes() -> None:
    """Decoding a pods file of 9 MB holds the pruned pods and a window of text, not a second 9 MB
    (a 10,000-pod list is 46 MB: that was the standalone agent's peak)."""
    import tracemalloc

    from qosmanager.api.pod import PrunedPod, prune_pod_hook

    pad = {f"k{i}": "v" * 40 for i in range(40)}  # dropped by the pruning, as managedFields are
    pod = {"metadata": {"uid": "", "name": "p", "managedFields": [pad]}, "spec": {"containers": [{"name": "c"}]},
           "status": {"phase": "Running"}}
    items = []
    for i in range(4500):
        pod["metadata"]["uid"] = f"00000000-0000-4000-8000-{i:012d}"
        items.append(json.dumps(pod))
    data = ('{"kind":"PodList","items":[' + ",".join(items) + "]}").encode()
    assert len(data) > 9_000_000
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        obj = load_document(data, "pods", DOCUMENT_LIMITS, prune_pod_hook)
        held, peak = (m - base for m in tracemalloc.get_traced_memory())
    finally:
        tracemalloc.stop()
    assert len(obj["items"]) == 4500 and all(isinstance(p, PrunedPod) for p in obj["items"])
    assert obj == json.loads(data, object_hook=prune_pod_hook)
    assert peak - held < len(data) / 2, (peak, held, len(data))


def test_load_object_reads_yaml_and_json() -> None:
    yaml_text = "apiVersion: slo.koordinator.sh/v1alpha1\nkind: NodeSLO\n"
    yaml_text += "spec:\n  cpuBurstStrategy:\n    policy: auto\n"
    assert parse_nodeslo(load_object(yaml_text)).cpu_burst_strategy.policy == "auto"
    doc = load_object('{"metadata": {"resourceVersion": "42"}}', "slo.json")
    assert doc["metadata"]["resourceVersion"] == "42"
    assert load_object(b'  {"a": [1, {"b": "]"}]}') == {"a": [1, {"b": "]"}]}
    assert load_object("{a: '[[[', b: [x, y]}") == {"a": "[[[", "b": ["x", "y"]}  # YAML flow style


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("spec: [unclosed", r"^/etc/slo.yaml: not valid YAML/JSON: [^\n]*$"),
        ("", r"^/etc/slo.yaml: empty document$"),
        ("- a\n- b\n", r"^/etc/slo.yaml: expected an object at the top level, got list$"),
        (nested(1000), r"^/etc/slo.yaml: nested deeper than 100 levels$"),
        ("{" + '"a": {' * 300 + "}" * 301, r"^/etc/slo.yaml: nested deeper than 100 levels$"),
        ("a:\n" + "".join("  " * i + "b:\n" for i in range(1, 150)), r"nested deeper than 100 levels$"),
        ("a:\n" + "- " * 500 + "x\n", r"nested deeper than 100 levels$"),
        ("a: &a [*a]\n", r"nested deeper than 100 levels$"),  # a cycle
        ("[" * 100_000, r"^/etc/slo.yaml: nested deeper than 100 levels$"),  # never closed
        ("a: [" + "[" * 2000, r"^/etc/slo.yaml: not valid YAML/JSON: [^\n]*$"),  # libyaml's own limit
        ("a: " + "1" * 5000 + "\n", r"^/etc/slo.yaml: not valid YAML/JSON"),  # int() of 5000 digits
    ],
)
def test_load_object_errors_name_the_path(text: str, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        load_object(text, "/etc/slo.yaml")


def test_yaml_aliases_count_with_what_they_stand_for() -> None:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefg"):
        prev = "abcdefg"[i]
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    bomb = "\n".join(levels) + "\n"  # 10**7 scalars once expanded
    with pytest.raises(DecodeError, match=r"^bomb: more than 8000000 values \(aliases expanded\)$"):
        load_object(bomb, "bomb")
    small = "base: &b {cpu: 1}\nx: *b\ny: *b\n"
    assert load_object(small) == {"base": {"cpu": 1}, "x": {"cpu": 1}, "y": {"cpu": 1}}
    with pytest.raises(DecodeError, match="more than 6 values"):
        load_object(small, "f", Limits(1 << 20, 10, 6))  # 1 + 3 x (key + {cpu: 1} of 3) = 10 nodes


def test_read_document_file_never_reads_more_than_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"items": [{"x": "y" * 100}] * 20}))
    assert len(read_document_file(str(path))["items"]) == 20
    with pytest.raises(DecodeError, match=rf"^{path}: larger than the limit of 1 KiB$"):
        read_document_file(str(path), Limits(1024, 10, 100))
    path.write_bytes(b"a: \xff\xfe\n")
    with pytest.raises(DecodeError, match="not UTF-8"):
        read_document_file(str(path))
    with pytest.raises(OSError):
        read_document_file(str(tmp_path / "missing.json"))


def test_keys_match_as_go_matches_struct_fields() -> None:
    assert go_fold("ioCfg") == go_fold("iocfg") == go_fold("IOCFG")
    assert go_fold("\u212aey") == go_fold("key")  # the Kelvin sign folds to K, as in Go
    assert go_fold("\u017fet") == go_fold("set")  # the long s folds to S
    assert go_fold("\u0130d") != go_fold("id")  # Go does not fold the dotted capital I to i
    status = {"CPUSet": "0-1", "other": 1, "cpuset": "2-3"}
    assert fold_get(status, "cpuset") == "2-3"  # each match is assigned in turn: the last wins
    assert fold_get({"cpuset": "0", "CPUSET": "1"}, "cpuset") == "1"
    assert fold_get({"cpusets": "0"}, "cpuset", "none") == "none"
    assert ANNOTATION_LIMITS.max_bytes == 256 * 1024


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("body", [
    b'{"kind": "PodList", "items": [{"metadata": {"name": "a\\u00e9", "uid": "u1"}}]}',
    b'  \n{"a": [1, 2.5, "\xc3\xa9", null, true]}',
    b'{"a": 1e400}',  # json.loads reads it as inf: so does the document decoder
])
def test_a_byte_order_mark_decodes_exactly_as_json_loads_reads_the_rest(body: bytes) -> None:
    want = json.loads(body)
    assert load_document(BOM + body, "doc") == want
    assert load_document((BOM + body).decode("utf-8"), "doc") == want
    big = b'{"items": [' + b",".join([body] * (5 * 1024 * 1024 // len(body) + 1)) + b"]}"
    assert len(big) >= 4 << 20  # decoded in windows
    assert load_document(BOM + big, "doc") == json.loads(big)


def test_a_big_document_that_is_not_json_is_refused_at_once_naming_the_json_error() -> None:
    pods = [{"metadata": {"name": f"p{i}", "uid": f"u{i}"}, "spec": {"containers": [{"name": "c"}]}}
            for i in range(60_000)]
    text = json.dumps({"items": pods})
    bad = text[:-2] + ",]}"  # one trailing comma
    assert len(bad) > 4 << 20
    with pytest.raises(DecodeError) as err:
        load_document(bad, "/etc/pods.json")
    message = str(err.value)
    assert message.startswith("/etc/pods.json: not valid JSON (")
    assert f"at {len(bad)} bytes too large to be read as YAML (a document over 256 KiB must be JSON)" in message
    assert "column" in message  # where the JSON parser stopped: the operator finds the comma
    small_bad = bad[:200_000]  # under the YAML bound: still read as YAML, which says what is wrong
    with pytest.raises(DecodeError, match="not valid YAML/JSON"):
        load_document(small_bad, "/etc/pods.json")
    yaml_text = "a:\n" + "".join(f"  k{i}: v\n" for i in range(40_000))
    assert len(yaml_text) > 256 * 1024
    with pytest.raises(DecodeError, match=r"^big.yaml: not JSON, and at \d+ bytes too large to be read as YAML"):
        load_document(yaml_text, "big.yaml")
    assert load_document(yaml_text, "big.yaml", Limits(64 << 20, 100, 8_000_000))["a"]["k7"] == "v"
