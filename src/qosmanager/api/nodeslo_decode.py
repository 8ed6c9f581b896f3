"""Decoding a NodeSLO through its schema: Go's key matching, the overlay, the typed build.

What it decodes and why as it does is told in :mod:`qosmanager.api.nodeslo` (the door: import
from there); the schema itself is :mod:`qosmanager.api.nodeslo_schema`.

Map of the file:

* key matching like Go's ``encoding/json`` (exact, else case-insensitive; ``_schema()`` per
  dataclass) and ``_go_fields()``, which applies several keys of one object in document order;
* :func:`json_overlay` and :func:`merge_spec`: the user's spec over koordlet's defaults, then the
  "None" variants of disabled features;
* the typed build: ``_convert()`` checks one value against its field spec, ``_build()`` a
  dataclass, ``_fallback()`` what a dropped value falls back to, ``_build_list()`` a list;
* the entry points: :func:`from_dict` (pod annotations, strict), :func:`overlay_config`,
  :func:`default_memory_qos` and :func:`parse_nodeslo`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from qosmanager.api.nodeslo_schema import (
    _DEFAULT_MEMORY_QOS,
    _DEFAULT_SPEC,
    _FEATURE_ROOTS,
    _INT64,
    _NONE_CPU_QOS,
    _NONE_MEMORY_QOS,
    _NONE_RESCTRL_QOS,
    API_VERSION,
    CPUQOS,
    EMPTY,
    FEATURE,
    KEEP,
    KIND,
    KOORDLET_ONLY_FIELDS,
    UNSET,
    BlkIOQOS,
    BlkIOQOSCfg,
    BlockCfg,
    CgroupPath,
    CPUBurstConfig,
    CPUBurstStrategy,
    CPUQOSCfg,
    HostApplicationSpec,
    IOCfg,
    MemoryQOS,
    MemoryQOSCfg,
    NetworkQOS,
    NetworkQOSCfg,
    NodeSLOError,
    NodeSLOSpec,
    PodMemoryQOSConfig,
    ResctrlQOS,
    ResctrlQOSCfg,
    ResourceQOS,
    ResourceQOSPolicies,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
    _Spec,
    _SpecBody,
    default_spec_dict,
)
from qosmanager.api.quantity import parse_quantity, value
from qosmanager.logfmt import shown

# --------------------------------------------------------------------------------------------
# Key matching: Go's encoding/json

# Go compares a key with a field name under Unicode simple case folding.  The field names here are
# ASCII, so that is ASCII case plus the two non-ASCII letters that fold onto ASCII ones.
_FOLD = str.maketrans({**{chr(c): chr(c + 32) for c in range(ord("A"), ord("Z") + 1)},
                       "\u212a": "k", "\u017f": "s"})  # KELVIN SIGN, LATIN SMALL LETTER LONG S


def _fold(key: str) -> str:
    return key.translate(_FOLD)


@dataclass(frozen=True, slots=True)
class _Schema:
    fields: tuple[tuple[str, _Spec, Any], ...]  # (attribute, spec, default) in declaration order
    exact: Mapping[str, _Spec]
    folded: Mapping[str, _Spec]


_SCHEMAS: dict[type, _Schema] = {}


def _schema(cls: type) -> _Schema:
    schema = _SCHEMAS.get(cls)
    if schema is None:
        fields = tuple((f.name, f.metadata["spec"], f.default) for f in dataclasses.fields(cls))
        schema = _Schema(fields, {s.json: s for _, s, _ in fields}, {_fold(s.json): s for _, s, _ in fields})
        _SCHEMAS[cls] = schema
    return schema


def _field_for(schema: _Schema, key: Any) -> _Spec | None:
    """The field a JSON key fills: the one named exactly so, else the one named so up to case."""
    if not isinstance(key, str):
        return None
    spec = schema.exact.get(key)
    return spec if spec is not None else schema.folded.get(_fold(key))


_MISSING = object()


def key_text(key: Any) -> str:
    """A key as a path or a log line shows it: printable (escapes spelled out, as ``repr`` does), at
    most 64 characters; a NodeSLO key is written by whoever may edit the NodeSLO, and ANSI escapes
    or a newline in it must not forge a line of the agent's log."""
    return shown(key, 64)


def _go_fields(schema: _Schema, raw: Mapping[Any, Any], path: str, dec: _Decode,
               unused: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The value of each field named in ``raw``, keyed by its JSON name, as Go decodes an object:
    keys in document order, a later key for the same field overwriting (an object merging into)
    the earlier one, unknown keys ignored and reported (:meth:`_Decode.misread`); a key of
    ``unused`` (a field koordlet knows and this agent does not use) is ignored with a warning."""
    out: dict[str, Any] = {}
    for key, item in raw.items():
        spec = _field_for(schema, key)
        if spec is None and isinstance(key, str) and _fold(key) in {_fold(u) for u in unused}:
            dec.warnings.append(f"{path}.{key_text(key)}: a field of koordlet's that this agent does not use, "
                                "ignored")
            continue
        if spec is None:
            dec.misread(f"{path}.{key_text(key)}", "unknown field ignored",
                        "unknown field: koordlet ignores it (a misspelt name?), so what it would set keeps "
                        "koordlet's default")
            continue
        prev = out.get(spec.json, _MISSING)
        if (spec.kind in ("obj", "boolmap", "any") and isinstance(prev, Mapping)
                and isinstance(item, Mapping)):
            item = json_overlay(prev, item, spec.cls if spec.kind == "obj" else None)
        out[spec.json] = item
    return out


# --------------------------------------------------------------------------------------------
# Merge


def json_overlay(base: Any, user: Any, cls: type | None = None) -> Any:
    """Overlay ``user`` onto ``base`` like Go's ``json.Unmarshal`` into a pre-filled struct.

    Objects merge key by key (recursively), lists and scalars replace, and ``None`` or ``""`` in
    ``user`` keeps the base value (Go's ``omitempty`` drops them before the overlay).  With ``cls``
    (the dataclass of this module that ``base`` is the JSON of), a key of ``user`` fills the field
    it names exactly or, failing that, case-insensitively, and the result carries it under the
    field's own name, so a default cannot shadow a differently-cased user key; keys that name no
    field stay as written (the builder reports them).  Keys of maps match exactly.  Neither argument
    is modified; the result shares no mutable parts with them.
    """
    if user is None or (user == "" and isinstance(base, str)):
        return copy.deepcopy(base)
    if not (isinstance(base, Mapping) and isinstance(user, Mapping)):
        return copy.deepcopy(user)
    out = {k: copy.deepcopy(v) for k, v in base.items()}
    schema = _schema(cls) if cls is not None else None
    for key, item in user.items():
        spec = _field_for(schema, key) if schema is not None else None
        if spec is None:
            out[key] = json_overlay(out[key], item) if key in out else copy.deepcopy(item)
            continue
        sub = spec.cls if spec.kind == "obj" else None
        name = spec.json
        if name in out:
            out[name] = json_overlay(out[name], item, sub)
        elif item is not None:
            out[name] = json_overlay({}, item, sub) if isinstance(item, Mapping) else copy.deepcopy(item)
    return out


def _json_names(cls: Any) -> list[str]:
    return [f.metadata["spec"].json for f in dataclasses.fields(cls)]


_NONE_VARIANTS = (
    ("cpuQOS", _json_names(CPUQOS), _NONE_CPU_QOS),
    ("resctrlQOS", _json_names(ResctrlQOS), _NONE_RESCTRL_QOS),
    ("memoryQOS", _json_names(MemoryQOS), _NONE_MEMORY_QOS),
)


def _apply_none_variants(strategy: Any) -> None:
    """A disabled cpu/resctrl/memory QoS of the LSR, LS and BE classes carries the None values."""
    if not isinstance(strategy, dict):
        return
    for class_key in ("lsrClass", "lsClass", "beClass"):  # not systemClass: koordlet leaves it as is
        klass = strategy.get(class_key)
        if not isinstance(klass, dict):
            continue
        for qos_key, inline_fields, none_values in _NONE_VARIANTS:
            cfg = klass.get(qos_key)
            if isinstance(cfg, dict) and cfg.get("enable") is False:
                kept = {k: v for k, v in cfg.items() if k not in inline_fields}
                klass[qos_key] = {**kept, **copy.deepcopy(none_values)}


def merge_spec(user_spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The user's NodeSLO spec overlaid onto the defaults, then disabled classes set to None values.

    ``None`` gives the merged defaults.  Keys match field names like Go's (see :func:`json_overlay`);
    the result carries every known field under its own name.  Raises :class:`NodeSLOError` if
    ``user_spec`` is not an object.  Types inside are not checked here (that is
    :func:`parse_nodeslo`'s job).
    """
    if user_spec is not None and not isinstance(user_spec, Mapping):
        raise NodeSLOError(f"spec: must be an object, got {_show(user_spec)}")
    merged: dict[str, Any] = json_overlay(default_spec_dict(), user_spec, _SpecBody)
    _apply_none_variants(merged.get("resourceQOSStrategy"))
    return merged


# --------------------------------------------------------------------------------------------
# Validation and typed build


def _show(raw: Any) -> str:
    try:
        text = json.dumps(raw)
    except (TypeError, ValueError):
        text = repr(raw)
    return text if len(text) <= 80 else text[:77] + "..."


def _range_text(spec: _Spec) -> str:
    if spec.hi != _INT64[1]:
        return f" in [{spec.lo}, {spec.hi}]"
    return "" if spec.lo == _INT64[0] else f" >= {spec.lo}"


class _BadValue(NodeSLOError):
    """One value that cannot be used: where, and why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class _FeatureDrop(Exception):
    """Bad values whose fallback is to leave the enclosing feature object unset (see FEATURE)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(problems)
        self.problems = problems


@dataclass
class _Decode:
    """One decoding pass: ``strict`` (pod annotations: the first bad value raises) or lenient per
    field (a NodeSLO: bad values are dropped and collected in ``invalid``)."""

    strict: bool
    warnings: list[str] = field(default_factory=list)
    invalid: list[tuple[str, str]] = field(default_factory=list)

    def misread(self, path: str, warning: str, invalid: str) -> None:
        """Something koordlet reads otherwise than it is written (an unknown key, an enum value it
        replaces): a pod annotation's warning; in a NodeSLO, reported like a dropped value (the
        ``nodeslo`` condition, the metric, the Event), koordlet's reading still applying."""
        if self.strict:
            self.warnings.append(f"{path}: {warning}")
        else:
            self.invalid.append((path, invalid))


def _convert(spec: _Spec, raw: Any, path: str, dec: _Decode, dpath: tuple[str, ...] | None) -> Any:
    """``raw`` as the field's Python value; :class:`_BadValue` when it cannot be used at all."""
    kind = spec.kind
    if kind == "int":
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise _BadValue(path, f"must be an integer{_range_text(spec)}, got {_show(raw)}")
        assert spec.lo is not None and spec.hi is not None
        if not spec.lo <= raw <= spec.hi:
            raise _BadValue(path, f"must be an integer{_range_text(spec)}, got {_show(raw)}")
        return raw
    if kind == "bool":
        if not isinstance(raw, bool):
            raise _BadValue(path, f"must be a boolean, got {_show(raw)}")
        return raw
    if kind == "str":
        if not isinstance(raw, str):
            raise _BadValue(path, f"must be a string, got {_show(raw)}")
        return raw
    if kind == "enum":
        if isinstance(raw, str) and raw in spec.choices:
            return raw
        if not isinstance(raw, str) or spec.unknown is None:
            choices = ", ".join(json.dumps(c) for c in spec.choices)
            raise _BadValue(path, f"must be one of {choices}, got {_show(raw)}")
        if spec.unknown == KEEP:
            dec.warnings.append(f"{path}: unknown value {_show(raw)} kept as written (koordlet takes any "
                                "string here)")
            return raw
        meaning = json.dumps(spec.unknown)
        dec.misread(path, f"unknown value {_show(raw)} read as {meaning}, as koordlet reads it",
                    f"unknown value {_show(raw)}: koordlet reads it as {meaning}, which applies "
                    f"(one of {', '.join(json.dumps(c) for c in spec.choices if c)} was meant?)")
        return spec.unknown
    if kind == "obj":
        return _build(spec.cls, raw, path, dec, dpath)
    if kind == "list":
        if not isinstance(raw, list):
            raise _BadValue(path, f"must be a list, got {_show(raw)}")
        return _build_list(spec, raw, path, dec)
    if kind == "boolmap":
        if not isinstance(raw, Mapping):
            raise _BadValue(path, f"must be an object of booleans, got {_show(raw)}")
        out: dict[str, bool] = {}
        for key, item in raw.items():
            if isinstance(key, str) and isinstance(item, bool):
                out[key] = item
                continue
            bad = _BadValue(f"{path}.{key}", f"must be a boolean, got {_show(item)}")
            if dec.strict:
                raise bad
            dec.invalid.append((bad.path, f"{bad.reason}; the entry is ignored"))
        return MappingProxyType(out)
    if kind == "quantity":
        try:
            return value(raw)
        except ValueError as exc:
            raise _BadValue(path, str(exc)) from None
    if kind == "intstr":
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise _BadValue(path, f"must be a percentage (integer) or a quantity string, got {_show(raw)}")
        if isinstance(raw, int):
            assert spec.lo is not None and spec.hi is not None
            if not spec.lo <= raw <= spec.hi:
                raise _BadValue(path, f"a percentage must be in [{spec.lo}, {spec.hi}], got {raw}")
            return raw
        try:
            parse_quantity(raw)
        except ValueError as exc:
            raise _BadValue(path, str(exc)) from None
        return raw
    if kind == "any":
        if not isinstance(raw, Mapping):
            raise _BadValue(path, f"must be an object, got {_show(raw)}")
        return MappingProxyType(copy.deepcopy(dict(raw)))
    raise AssertionError(f"unknown field kind {kind}")  # pragma: no cover - schema bug


T = TypeVar("T")


def _build(cls: type[T], raw: Any, path: str, dec: _Decode, dpath: tuple[str, ...] | None) -> T:
    """One object of this module's dataclasses from JSON (``dpath``: its path in the defaults,
    where a dropped value finds koordlet's default; None inside lists and pod annotations)."""
    if not isinstance(raw, Mapping):
        raise _BadValue(path, f"must be an object, got {_show(raw)}")
    schema = _schema(cls)
    values = _go_fields(schema, raw, path, dec, KOORDLET_ONLY_FIELDS.get(cls, frozenset()))
    kwargs: dict[str, Any] = {}
    feature_problems: list[tuple[str, str]] = []
    for name, spec, default in schema.fields:
        item = values.get(spec.json)
        if item is None:
            kwargs[name] = default
            continue
        fpath = f"{path}.{spec.json}"
        fdpath = None if dpath is None else (*dpath, spec.json)
        try:
            kwargs[name] = _convert(spec, item, fpath, dec, fdpath)
        except _FeatureDrop as drop:
            if spec.kind == "obj" and spec.cls in _FEATURE_ROOTS:
                dec.invalid.extend((p, f"{r}; {fpath} is ignored") for p, r in drop.problems)
                kwargs[name] = None
            else:
                feature_problems.extend(drop.problems)
                kwargs[name] = default
        except _BadValue as bad:
            if dec.strict:
                raise
            if spec.on_bad == FEATURE:
                feature_problems.append((bad.path, bad.reason))
                kwargs[name] = default
            else:
                kwargs[name] = _fallback(spec, default, fdpath, bad, dec)
    if feature_problems:
        raise _FeatureDrop(feature_problems)
    return cls(**kwargs)


def _fallback(spec: _Spec, default: Any, dpath: tuple[str, ...] | None, bad: _BadValue, dec: _Decode) -> Any:
    """What a dropped value of a NodeSLO field is replaced with (its ``on_bad``), recorded."""
    if spec.on_bad == EMPTY:
        dec.invalid.append((bad.path, f"{bad.reason}; every field of it is left unset"))
        return spec.cls()
    if spec.on_bad == UNSET:
        dec.invalid.append((bad.path, f"{bad.reason}; left unset (what it sets is left as it is)"))
        return None
    node: Any = _DEFAULT_SPEC if dpath is not None else None
    for key in dpath or ():
        node = node.get(key) if isinstance(node, Mapping) else None
    if node is None:
        dec.invalid.append((bad.path, f"{bad.reason}; left unset, as if not written"))
        return default
    shown = _show(node) if not isinstance(node, (Mapping, list)) else "value"
    dec.invalid.append((bad.path, f"{bad.reason}; koordlet's default {shown} applies"))
    return _convert(spec, node, bad.path, _Decode(strict=True), dpath)


def _build_list(spec: _Spec, raw: list[Any], path: str, dec: _Decode) -> tuple[Any, ...]:
    """The objects of a list.  A bad entry of a feature root (a host application) is left out;
    a bad entry of anything else leaves the enclosing feature unset (a blkio block)."""
    items: list[tuple[int, Any]] = []
    feature_problems: list[tuple[str, str]] = []
    for i, entry in enumerate(raw):
        try:
            items.append((i, _build(spec.cls, entry, f"{path}[{i}]", dec, None)))
            continue
        except _BadValue as bad:  # the entry itself is not an object
            if dec.strict:
                raise
            problems = [(bad.path, bad.reason)]
        except _FeatureDrop as drop:
            problems = drop.problems
        if spec.cls in _FEATURE_ROOTS:
            dec.invalid.extend((p, f"{r}; {path}[{i}] is ignored") for p, r in problems)
        else:
            feature_problems.extend(problems)
    if feature_problems:
        raise _FeatureDrop(feature_problems)
    check = _LIST_CHECKS.get(spec.cls)
    if check is not None and not dec.strict:
        items = check(items, path, dec)
    return tuple(item for _, item in items)


def _unique_host_apps(items: list[tuple[int, Any]], path: str, dec: _Decode) -> list[tuple[int, Any]]:
    """Host applications need a name, unique in the list (usage is keyed by it): others are left out."""
    kept: list[tuple[int, Any]] = []
    names: set[str] = set()
    for i, app in items:
        if app.name == "" or app.name in names:
            why = "is required" if app.name == "" else f"duplicate name {_show(app.name)}"
            dec.invalid.append((f"{path}[{i}].name", f"{why}; {path}[{i}] is ignored"))
            continue
        names.add(app.name)
        kept.append((i, app))
    return kept


_LIST_CHECKS: dict[type, Any] = {HostApplicationSpec: _unique_host_apps}


def _to_json(obj: Any) -> Any:
    """A built object back as JSON: fields that are unset or hold their zero value left out (Go's
    ``omitempty``: an empty ``cgroupPath`` stays empty, so the default path applies)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {spec.json: _to_json(getattr(obj, name))
                for name, spec, default in _schema(type(obj)).fields
                if getattr(obj, name) is not None and getattr(obj, name) != default}
    if isinstance(obj, Mapping):
        return copy.deepcopy(dict(obj))
    if isinstance(obj, tuple):
        return [_to_json(item) for item in obj]
    return obj


def from_dict(cls: type[T], raw: Any, path: str = "") -> tuple[T, tuple[str, ...]]:
    """Validate a JSON object against one of this module's dataclasses (no defaults merged).

    Used for NodeSLO-shaped pod annotations (``koordinator.sh/cpuBurst`` -> :class:`CPUBurstConfig`,
    ``koordinator.sh/memoryQOS`` -> :class:`PodMemoryQOSConfig`, ``koordinator.sh/blkioQOS`` ->
    :class:`BlkIOQOS`).  Keys match like Go's (exactly, else case-insensitively; unknown ones are
    ignored), enum-like strings are read the way koordlet reads them.  Returns the object and the
    warnings (unknown fields, such enum values); strict otherwise: raises :class:`NodeSLOError`
    naming ``path`` on the first bad type or range.
    """
    dec = _Decode(strict=True)
    return _build(cls, raw, path or cls.__name__, dec, None), tuple(dec.warnings)


def overlay_config(base: T, top: object) -> T:
    """Fields set in ``top`` (not ``None``, not ``""``) replace those of ``base``.

    The dataclass form of :func:`json_overlay`, for pod-level overrides of a node-level config
    (e.g. a pod's ``koordinator.sh/cpuBurst`` over ``cpuBurstStrategy``).  ``top`` may be an
    instance of a sibling class sharing the fields (a :class:`PodMemoryQOSConfig` over a
    :class:`MemoryQOSCfg`): only the fields ``base`` has are considered.
    """
    base_names = {f.name for f in dataclasses.fields(base)}  # type: ignore[arg-type]
    changes = {
        f.name: getattr(top, f.name)
        for f in dataclasses.fields(top)  # type: ignore[arg-type]
        if f.name in base_names and getattr(top, f.name) not in (None, "")
    }
    return dataclasses.replace(base, **changes)  # type: ignore[type-var]


def default_memory_qos(qos: str) -> MemoryQOS | None:
    """The memory QoS template of a QoS class (the pod annotation's ``policy: auto``), or None."""
    template = _DEFAULT_MEMORY_QOS.get("LSR" if qos == "LSE" else qos)
    return None if template is None else _build(MemoryQOS, template, "default", _Decode(strict=True), None)


def _build_spec(merged: Mapping[str, Any], resource_version: str) -> NodeSLOSpec:
    dec = _Decode(strict=False)
    body = _build(_SpecBody, merged, "spec", dec, ())
    return NodeSLOSpec(
        resource_used_threshold_with_be=body.resource_used_threshold_with_be,
        resource_qos_strategy=body.resource_qos_strategy,
        cpu_burst_strategy=body.cpu_burst_strategy,
        system_strategy=body.system_strategy,
        extensions=body.extensions,
        host_applications=body.host_applications,
        resource_version=resource_version,
        warnings=tuple(dec.warnings),
        invalid_fields=tuple(dec.invalid),
        merged=MappingProxyType(_to_json(body)),
    )


def parse_nodeslo(obj: Mapping[str, Any] | None) -> NodeSLOSpec:
    """Merge and validate a whole NodeSLO object; ``None`` (no NodeSLO) gives the merged defaults.

    The object may omit ``apiVersion``/``kind`` (hand-written files); when present they must be
    ``slo.koordinator.sh/v1alpha1`` / ``NodeSLO``.  A missing or ``null`` ``spec`` means defaults.
    Lenient per field: a bad value is dropped, reported in :attr:`NodeSLOSpec.invalid_fields` and
    replaced as the module docstring says; everything else applies.  Raises :class:`NodeSLOError`
    only for a document that is not a NodeSLO at all (not an object, another ``apiVersion`` or
    ``kind``, a ``spec`` or ``metadata`` that is not an object).
    """
    if obj is None:
        return _build_spec(merge_spec(None), "")
    if not isinstance(obj, Mapping):
        raise NodeSLOError(f"NodeSLO: must be an object, got {_show(obj)}")
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version != API_VERSION:
        raise NodeSLOError(f"apiVersion: must be {json.dumps(API_VERSION)}, got {_show(api_version)}")
    kind = obj.get("kind")
    if kind is not None and kind != KIND:
        raise NodeSLOError(f"kind: must be {json.dumps(KIND)}, got {_show(kind)}")
    metadata = obj.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise NodeSLOError(f"metadata: must be an object, got {_show(metadata)}")
    resource_version = metadata.get("resourceVersion") or ""
    return _build_spec(merge_spec(obj.get("spec")), str(resource_version))


__all__ = [
    "API_VERSION",
    "KIND",
    "BlkIOQOS",
    "BlkIOQOSCfg",
    "BlockCfg",
    "CPUBurstConfig",
    "CPUBurstStrategy",
    "CPUQOS",
    "CPUQOSCfg",
    "CgroupPath",
    "HostApplicationSpec",
    "IOCfg",
    "KOORDLET_ONLY_FIELDS",
    "MemoryQOS",
    "MemoryQOSCfg",
    "NetworkQOS",
    "NetworkQOSCfg",
    "NodeSLOError",
    "NodeSLOSpec",
    "PodMemoryQOSConfig",
    "ResctrlQOS",
    "ResctrlQOSCfg",
    "ResourceQOS",
    "ResourceQOSPolicies",
    "ResourceQOSStrategy",
    "ResourceThresholdStrategy",
    "SystemStrategy",
    "default_memory_qos",
    "default_spec_dict",
    "from_dict",
    "json_overlay",
    "merge_spec",
    "overlay_config",
    "parse_nodeslo",
]
