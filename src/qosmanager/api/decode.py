"""Bounded decoding of every JSON and YAML text the agent reads.

Everything that reaches the agent as text -- a pod's annotations, the standalone state files, the
API server's answers and watch events, ``replay`` scenarios -- is decoded here, with limits on its
size and on how deeply it nests.  Without them a 2 KB annotation (``"[" * 1000 + "]" * 1000``)
raises ``RecursionError`` out of the decoder, and data nested a few hundred levels deep passes
the decoder only to break ``copy.deepcopy`` or a JSON overlay later.  With them, bad input is
one :class:`DecodeError` (a ``ValueError``) that says what was wrong and where, and nothing that
was decoded can be deeper than the limit, so no later step that walks it can recurse too far.

Limits (:class:`Limits`):

* **annotations** (:data:`ANNOTATION_LIMITS`): 256 KiB -- the Kubernetes API server's limit for
  *all* annotations of an object together -- 64 levels of nesting and 65,536 objects and lists;
* **documents** (:data:`DOCUMENT_LIMITS`: state files): 64 MiB, 100 levels, 8 million values
  (the kubelet's pod list of a 1,000-pod node is a few MiB and about 15 levels deep), of which
  at most 256 KiB as YAML: a document that is not strict JSON goes to the YAML parser, which took
  15 s and 298 MiB on a 5 MB pods file with one trailing comma; a larger one is refused at once,
  with the JSON parser's error (line and column);
* **API answers** (:data:`RESPONSE_LIMITS`: a list page or a watch event): 128 MiB, 100 levels,
  8 million objects and lists.

JSON is checked *before* it is parsed: the depth of its brackets outside string literals is
measured (vectorised, a fraction of the parse time), so nothing is allocated for a document that
is refused.  A document that starts with ``{`` or ``[`` is JSON or YAML's flow style, where
brackets nest alike; the rare flow-style YAML with brackets inside single-quoted strings may
count deeper than it is.  YAML is composed by libyaml (which has its own nesting limit of 1,000)
and its node graph is checked before any Python object is built; an alias counts with everything
it stands for, so a "billion laughs" document is refused instead of being walked a billion times
later.  A JSON document of 4 MiB or more (a big node's pods file) is then decoded member by member
and item by item from a window of its text, never as one string beside its bytes.

JSON follows Go's ``encoding/json`` where that matters to annotations: ``NaN`` and ``Infinity`` are
not JSON.  :func:`go_fold` and :func:`fold_get` match object keys the way ``encoding/json`` matches
them to struct fields (an exact match or a case-insensitive one).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import yaml

KIB, MIB = 1 << 10, 1 << 20


class DecodeError(ValueError):
    """Text that could not be decoded within its limits; the message says what and where."""


@dataclass(frozen=True, slots=True)
class Limits:
    max_bytes: int  # the UTF-8 size of the text
    max_depth: int  # objects and lists inside each other; a scalar at the top is depth 0
    # JSON: objects and lists in all (counted before parsing; the size bounds the scalars); YAML:
    # every node, an alias counting as everything it stands for
    max_nodes: int
    # the largest text given to the YAML parser (None: max_bytes); a larger document must be JSON
    max_yaml_bytes: int | None = None


ANNOTATION_LIMITS = Limits(max_bytes=256 * KIB, max_depth=64, max_nodes=64 * KIB)
DOCUMENT_LIMITS = Limits(max_bytes=64 * MIB, max_depth=100, max_nodes=8_000_000, max_yaml_bytes=256 * KIB)
RESPONSE_LIMITS = Limits(max_bytes=128 * MIB, max_depth=100, max_nodes=8_000_000)


# A JSON string literal (the unrolled form: fast on long strings); what is left once they are cut
# out holds every bracket that nests.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_START = re.compile(rb"[ \t\r\n]*[\[{]")
_BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark
_BRACKETS_ONLY = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SMALL = 16 * KIB  # below this the bracket check runs on bytes; above, vectorised in chunks
# each chunk makes a few int32 arrays of its length: 128 KiB keeps them ~2 MiB in all, where 1 MiB
# chunks of int64 took 40 MiB, more than decoding a 1,000-pod list itself
_CHUNK = 128 * KIB
_QUOTE, _OPEN1, _OPEN2, _CLOSE1, _CLOSE2, _BACKSLASH = (ord(c) for c in '"[{]}\\')


def _error(what: str, message: str) -> DecodeError:
    return DecodeError(f"{what}: {message}" if what else message)


def _size(what: str, n: int, limits: Limits) -> None:
    if n > limits.max_bytes:
        raise _error(what, f"{n} bytes, more than the limit of {_human(limits.max_bytes)}")


def _human(n: int) -> str:
    if n % MIB == 0:
        return f"{n // MIB} MiB"
    if n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} bytes"


def _too_deep(what: str, limits: Limits) -> DecodeError:
    return _error(what, f"nested deeper than {limits.max_depth} levels")


def _too_many(what: str, limits: Limits, kind: str = "objects and lists") -> DecodeError:
    return _error(what, f"more than {limits.max_nodes} {kind}")


def _as_bytes(text: str | bytes, what: str, limits: Limits) -> bytes:
    if isinstance(text, str):
        _size(what, len(text), limits)  # a character is at least one byte: refuse before encoding
        data = text.encode("utf-8", "surrogatepass")
    else:
        data = bytes(text)
    _size(what, len(data), limits)
    return data


def _check_json_nesting(data: bytes, what: str, limits: Limits) -> None:
    """Refuse JSON text nested deeper than the limit or holding too many objects and lists.

    Brackets inside string literals do not count; in unbalanced text the brackets never closed do.
    What passes is parsed next, and the parser says what else is wrong with it.
    """
    depth, containers = _nesting_small(data) if len(data) <= _SMALL else _nesting_large(data)
    if containers > limits.max_nodes:
        raise _too_many(what, limits)
    if depth > limits.max_depth:
        raise _too_deep(what, limits)


def _nesting_small(data: bytes) -> tuple[int, int]:
    """(depth, containers): string literals cut out, then each pass removes the innermost pairs
    (one level each)."""
    brackets = _STRING.sub(b"", data).translate(_BRACKETS_ONLY, _NOT_BRACKETS)
    containers = brackets.count(b"[")
    depth = 0
    while brackets:
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):
            break
        depth += 1
        brackets = shorter
    # what is left is unbalanced ("]]][[["): the brackets never closed nest on top of the rest
    return depth + brackets.count(b"["), containers


def _nesting_large(data: bytes) -> tuple[int, int]:
    """(depth, containers) in chunks: escapes dropped, the parity of the quotes before a byte says
    whether it is inside a string, and the running sum of opening minus closing brackets outside
    strings is the depth."""
    inside, depth, deepest, containers = 0, 0, 0, 0
    start, n = 0, len(data)
    while start < n:
        # a chunk never ends inside a run of backslashes, so each escape lies within one chunk and
        # is dropped there (dropping them from the whole text at once copied it twice: 2 x 58 MB
        # for a 10,000-pod list)
        end = min(start + _CHUNK, n)
        while end < n and data[end - 1] == _BACKSLASH:
            end += 1
        chunk = data[start:end].replace(b"\\\\", b"").replace(b'\\"', b"")
        start = end
        if not chunk:
            continue
        arr = np.frombuffer(chunk, dtype=np.uint8)
        outside = ((np.cumsum(arr == _QUOTE, dtype=np.int32) + inside) & 1) == 0
        inside = 0 if outside[-1] else 1
        opening = ((arr == _OPEN1) | (arr == _OPEN2)) & outside
        closing = ((arr == _CLOSE1) | (arr == _CLOSE2)) & outside
        running = np.cumsum(opening.astype(np.int32) - closing, dtype=np.int32) + depth
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
        containers += int(np.count_nonzero(opening))
    return deepest, containers


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"number {text} is out of the range of a float64")
    return number


def decode_json(text: str | bytes, limits: Limits = ANNOTATION_LIMITS, what: str = "",
                object_hook: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """Strict JSON (Go's ``encoding/json``: no NaN or Infinity, no float beyond float64) within ``limits``.

    Raises :class:`DecodeError` naming ``what`` when the text is too large, too deep or not JSON.
    ``object_hook`` (``json``'s) may shrink each object as it is decoded (a pod list is pruned pod by
    pod instead of being held whole).
    """
    data = _as_bytes(text, what, limits)
    _check_json_nesting(data, what, limits)
    try:
        return json.loads(data, parse_constant=_not_json, parse_float=_finite, object_hook=object_hook)
    except RecursionError:  # cannot happen after the check; never let it escape anyway
        raise _too_deep(what, limits) from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer of too many digits
        raise _error(what, f"not valid JSON: {e}") from None


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value
    elif isinstance(node, yaml.SequenceNode):
        yield from node.value


def _check_yaml_nodes(root: yaml.Node, what: str, limits: Limits) -> None:
    """Depth and expanded size of a composed YAML document, without recursion.

    A node reached twice (an alias) is counted each time with its whole subtree (from a memo, so
    the walk is linear in the distinct nodes); a cycle nests without end and fails the depth.
    """
    import yaml

    if not isinstance(root, yaml.CollectionNode):
        return
    sizes: dict[int, int] = {}
    # frames: [node, depth, its children, nodes counted so far in its subtree]
    frames: list[list[Any]] = [[root, 1, _children(root), 1]]
    while frames:
        frame = frames[-1]
        child = next(frame[2], None)
        if child is None:
            frames.pop()
            sizes[id(frame[0])] = frame[3]
            if frames:
                frames[-1][3] += frame[3]
            elif frame[3] > limits.max_nodes:
                raise _too_many(what, limits, "values (aliases expanded)")
            continue
        if isinstance(child, yaml.CollectionNode):
            known = sizes.get(id(child))
            if known is None:
                if frame[1] >= limits.max_depth:
                    raise _too_deep(what, limits)
                frames.append([child, frame[1] + 1, _children(child), 1])
                continue
            frame[3] += known
        else:
            frame[3] += 1
        if frame[3] > limits.max_nodes:
            raise _too_many(what, limits, "values (aliases expanded)")


def _decode_yaml(text: str, what: str, limits: Limits) -> Any:
    # imported when a document is YAML: the agent's own files and API answers are JSON, and PyYAML
    # costs 1.5 MiB of every process that never reads any
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_yaml_nodes(node, what, limits)
        return loader.construct_document(node)
    except DecodeError:
        raise
    except RecursionError:
        raise _too_deep(what, limits) from None
    except (yaml.YAMLError, ValueError, TypeError) as e:  # int("1" * 5000) is a ValueError
        raise _error(what, f"not valid YAML/JSON: {' '.join(str(e).split())}") from None
    finally:
        loader.dispose()


def load_document(text: str | bytes, what: str = "", limits: Limits = DOCUMENT_LIMITS,
                  object_hook: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """A YAML or JSON document (JSON is YAML) within ``limits``; ``DecodeError`` names ``what``.

    JSON is tried first: the kubelet's pod list of a big node is megabytes, and the YAML parser
    takes seconds on it where the JSON parser takes milliseconds.  ``object_hook`` applies to JSON
    only (a YAML document is small or rare: its caller shrinks the result).
    """
    data = _as_bytes(text, what, limits)
    if data.startswith(_BOM):  # a byte-order mark (an editor's): the document is what follows it
        data = data[len(_BOM):]
        text = data
    json_error = ""
    if _JSON_START.match(data):
        # JSON, or YAML's flow style: brackets nest alike in both (a YAML plain scalar inside
        # brackets cannot hold one), so the check is right for either
        _check_json_nesting(data, what, limits)
        try:
            if len(data) >= STREAM_MIN:
                return _loads_in_windows(data, object_hook)
            return json.loads(data, object_hook=object_hook)
        except RecursionError:
            json_error = "nested too deeply for the JSON parser"
        except ValueError as e:  # not JSON: YAML says what is wrong with it, if it is small enough
            json_error = " ".join(str(e).split())
    yaml_max = limits.max_yaml_bytes
    if yaml_max is not None and len(data) > yaml_max:
        why = f"not valid JSON ({json_error})" if json_error else "not JSON"
        raise _error(what, f"{why}, and at {len(data)} bytes too large to be read as YAML (a document "
                           f"over {_human(yaml_max)} must be JSON)")
    if isinstance(text, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _error(what, f"not UTF-8 text: {e.reason}") from None
    return _decode_yaml(text, what, limits)


# A JSON document this long is decoded from windows of its text (see _loads_in_windows).
STREAM_MIN = 4 * MIB
_WINDOW = 1 * MIB
_WS = re.compile(r"[ \t\n\r]*")
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class _More(Exception):
    """The value at the window's position does not end within the window."""


class _Windows:
    """The text of UTF-8 ``data`` one window at a time: ``text[i]`` is byte ``base + <its offset>``."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.view = memoryview(data)
        self.text = ""
        self.ascii = True
        self.base = 0
        self.size = _WINDOW
        self.eof = False
        self.load(0, False)

    def load(self, i: int, grow: bool) -> int:
        """Start a new window at ``text[i]`` (twice as long when ``grow``); the new index of it (0)."""
        self.base += i if self.ascii else len(self.text[:i].encode("utf-8", "surrogatepass"))
        if grow:
            self.size *= 2
        data, end = self.data, min(self.base + self.size, len(self.data))
        while end < len(data) and end > self.base and data[end] & 0xC0 == 0x80:
            end -= 1  # not inside a character
        self.eof = end == len(data)
        self.text = ""  # the old window goes before the new one is made
        self.text = str(self.view[self.base:end], "utf-8", "surrogatepass")
        self.ascii = self.text.isascii()
        return 0

    def token(self, i: int, parse: Callable[[str, int], tuple[Any, int]]) -> tuple[Any, int]:
        """``parse(text, i)`` -> (value, end), sliding or widening the window until it holds the value."""
        while True:
            try:
                value, end = parse(self.text, i)
            except (ValueError, StopIteration):  # JSONDecodeError: cut short here, or bad text
                if self.eof:
                    raise
            else:
                # a number or literal that runs to the window's end may go on beyond it
                if end < len(self.text) or self.eof:
                    return value, end
            i = self.load(i, grow=i == 0)

    def skip(self, i: int) -> tuple[str, int]:
        """The next character after white space (``""`` at the end) and its index."""
        while True:
            i = _WS.match(self.text, i).end()  # type: ignore[union-attr]
            if i < len(self.text) or self.eof:
                return self.text[i:i + 1], i
            i = self.load(i, grow=False)


def _loads_in_windows(data: bytes, object_hook: Callable[[dict[str, Any]], Any] | None) -> Any:
    """``json.loads(data, object_hook=...)``, without the whole text as one ``str`` beside the bytes
    (a 10,000-pod list file is 46 MB: 46 MB more at the peak).  The top-level object's members and
    the items of its arrays (and of a top-level array) are decoded one by one from a window of
    about 1 MiB of text; anything else -- text that is not JSON, or not UTF-8 -- is decoded by
    ``json.loads``, which says what is wrong with it."""
    if json.detect_encoding(data[:4]) != "utf-8":
        return json.loads(data, object_hook=object_hook)
    try:
        return _windowed(_Windows(data), json.JSONDecoder(object_hook=object_hook), object_hook)
    except (ValueError, StopIteration, RecursionError):
        return json.loads(data, object_hook=object_hook)


def _windowed(w: _Windows, dec: json.JSONDecoder,
              object_hook: Callable[[dict[str, Any]], Any] | None) -> Any:
    def array(i: int) -> tuple[list[Any], int]:  # at "["
        out: list[Any] = []
        c, i = w.skip(i + 1)
        if c == "]":
            return out, i + 1
        while True:
            item, i = w.token(i, dec.raw_decode)
            out.append(item)
            c, i = w.skip(i)
            if c == "]":
                return out, i + 1
            if c != ",":
                raise ValueError("expected , or ]")
            _, i = w.skip(i + 1)

    def value(i: int) -> tuple[Any, int]:
        c, i = w.skip(i)
        return array(i) if c == "[" else w.token(i, dec.raw_decode)

    result: Any
    c, i = w.skip(0)
    if c == "[":
        result, i = array(i)
    elif c == "{":
        obj: dict[str, Any] = {}
        c, i = w.skip(i + 1)
        if c != "}":
            while True:
                if c != '"':
                    raise ValueError("expected a member name")
                key, i = w.token(i, lambda text, at: _scanstring(text, at + 1))
                c, i = w.skip(i)
                if c != ":":
                    raise ValueError("expected :")
                obj[key], i = value(i + 1)
                c, i = w.skip(i)
                if c == "}":
                    break
                if c != ",":
                    raise ValueError("expected , or }")
                c, i = w.skip(i + 1)
        i += 1
        result = object_hook(obj) if object_hook is not None else obj
    else:
        raise ValueError("not an object or array")
    c, i = w.skip(i)
    if c:
        raise ValueError("extra data")
    return result


def load_object(text: str | bytes, path: str = "", limits: Limits = DOCUMENT_LIMITS,
                object_hook: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
    """Parse a YAML or JSON document into a dict; ``ValueError`` (:class:`DecodeError`) names ``path``."""
    where = path or "<text>"
    obj = load_document(text, where, limits, object_hook)
    if obj is None:
        raise DecodeError(f"{where}: empty document")
    if not isinstance(obj, dict):
        raise DecodeError(f"{where}: expected an object at the top level, got {type(obj).__name__}")
    return obj


def read_document_file(path: str, limits: Limits = DOCUMENT_LIMITS,
                       object_hook: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
    """Read and decode a state file; at most ``limits.max_bytes`` are read, whatever the file holds.

    ``OSError`` when it cannot be read, :class:`DecodeError` when it is too large or not a document.
    """
    with open(path, "rb") as f:
        data = f.read(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise _error(path, f"larger than the limit of {_human(limits.max_bytes)}")
    return load_object(data, path, limits, object_hook)


# --------------------------------------------------------------------------------------------
# Go's key matching


def _fold_char(c: str) -> str:
    if c < "\x80":
        return c.upper()
    # Go folds a rune to the smallest rune of its simple case-folding orbit; the one-character
    # upper and lower cases (closed over each other) stand in for that orbit here.  What matters
    # for ASCII field names comes out as Go has it: the Kelvin sign folds to K, the long s to S.
    orbit = {c}
    todo = [c]
    while todo:
        x = todo.pop()
        for y in (x.lower(), x.upper()):
            if len(y) == 1 and y not in orbit:
                orbit.add(y)
                todo.append(y)
    return min(orbit)


def go_fold(name: str) -> str:
    """The folded form of a key: two keys match a Go struct field alike iff they fold alike."""
    if name.isascii():
        return name.upper()
    return "".join(_fold_char(c) for c in name)


def fold_get(obj: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """``obj``'s value for the field ``name`` as ``encoding/json`` decodes it into a struct: every
    key equal to ``name`` or equal to it ignoring case is assigned in turn, so the last one wins."""
    folded = go_fold(name)
    found = default
    for key, value in obj.items():
        if key == name or (isinstance(key, str) and go_fold(key) == folded):
            found = value
    return found


__all__ = [
    "ANNOTATION_LIMITS",
    "DOCUMENT_LIMITS",
    "RESPONSE_LIMITS",
    "DecodeError",
    "Limits",
    "decode_json",
    "fold_get",
    "go_fold",
    "load_document",
    "load_object",
    "read_document_file",
]
