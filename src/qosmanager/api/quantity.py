"""Kubernetes ``resource.Quantity`` parsing with exact arithmetic.

The wire format (``k8s.io/apimachinery/pkg/api/resource``)::

    <quantity>  ::= <sign>? <number> <suffix>?
    <number>    ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>    ::= Ki | Mi | Gi | Ti | Pi | Ei              (binary SI, powers of 1024)
                  | n | u | m | "" | k | M | G | T | P | E   (decimal SI, powers of 1000)
                  | (e|E) <sign>? <digits>                   (decimal exponent)

``E`` alone is exa; ``E3`` is an exponent.  ``n`` and ``u`` are not in the documented grammar but
the apiserver and the kubelet accept and emit them (``"250000n"`` is a kubelet CPU figure), so
they are accepted here too.

An amount with a binary suffix is capped at 2^63 - 1, as upstream caps it (``"1024Ei"`` reads as
9223372036854775807); decimal amounts are not capped (upstream does not cap them either).  An
exponent above 300 is refused; one below -300 leaves a non-zero amount at one nano, as upstream's
rounding does.

Values are kept as :class:`fractions.Fraction`, so ``"0.1"`` is exactly one tenth and sums of
quantities are exact.  Like the upstream parser, a value with more precision than one nano is
rounded *away from zero* to the next nano ("if you ask for some resource you get some").

JSON numbers are accepted the way the upstream ``UnmarshalJSON`` accepts them: by their decimal
text, so the float ``0.1`` parses as exactly ``1/10`` and not as its binary approximation.

``value`` and ``milli_value`` mirror ``Quantity.Value()`` and ``Quantity.MilliValue()``: any
remaining fraction is rounded away from zero (``"1.5"`` -> 2, ``"-1.5"`` -> -2, ``"0.5m"`` milli
-> 1).  For the non-negative quantities of real pods and nodes this is a ceiling (koordlet
§6 item 16: fractional node CPU capacity counts as the next whole core).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

QuantityLike = str | int | float | Fraction

_SUFFIX_FACTORS: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}

# Binary suffixes are tried before the single letters so "1Mi" is not read as "1M" + "i"; the
# exponent form is the fallback after every suffix failed to reach the end of the string.
_QUANTITY_RE = re.compile(
    r"""
    (?P<sign>[+-]?)
    (?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)
    (?:
        (?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)
      | [eE](?P<exponent>[+-]?[0-9]+)
    )?
    """,
    re.VERBOSE,
)

_NANO = Fraction(1, 10**9)
_MAX_BINARY = Fraction(2**63 - 1)
# Far beyond any resource amount, small enough that nobody can make us build a 10**(10**9).
_MAX_EXPONENT = 300


def _invalid(q: object, why: str = "") -> ValueError:
    return ValueError(f"invalid quantity {q!r}" + (f": {why}" if why else ""))


def _round_to_nano(amount: Fraction) -> Fraction:
    """Round ``amount`` away from zero to a multiple of 1e-9, as the upstream parser does."""
    scaled = amount / _NANO
    if scaled.denominator == 1:
        return amount
    magnitude = math.ceil(abs(scaled))
    return Fraction(magnitude if amount > 0 else -magnitude, 10**9)


@lru_cache(maxsize=8192)
def _parse_text(text: str) -> Fraction:
    # A node's pods repeat the same few strings ("100m", "1Gi") thousands of times: cache them.
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise _invalid(text)
    try:
        number = Fraction(match["number"] if not match["number"].endswith(".") else match["number"][:-1])
    except ValueError:  # more digits than Python converts (4,300): no resource amount has them
        raise _invalid(text, f"{len(match['number'])} digits are too many") from None
    suffix = match["suffix"] or ""
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if exponent < -_MAX_EXPONENT:
            # far below a nano: upstream rounds any non-zero amount up to one nano (the float 2.2e-311
            # of a JSON document is such an amount), so no 10**exponent needs to be built
            number = _NANO if number else Fraction(0)
        elif exponent > _MAX_EXPONENT:
            raise _invalid(text, f"exponent out of range (|e| <= {_MAX_EXPONENT})")
        else:
            number *= Fraction(10) ** exponent
    else:
        number *= _SUFFIX_FACTORS[suffix]
    number = _round_to_nano(number)
    if suffix.endswith("i") and number > _MAX_BINARY:
        number = _MAX_BINARY  # upstream caps an amount with a binary suffix at the largest int64
    return -number if match["sign"] == "-" else number


def parse_quantity(q: QuantityLike) -> Fraction:
    """Parse a quantity string or JSON number into an exact :class:`Fraction`.

    Raises ``ValueError("invalid quantity '...'")`` on anything that is not a quantity (garbage
    text, booleans, NaN/infinity, ``None``).  Surrounding whitespace is ignored, as in the
    upstream JSON decoder; inner whitespace is an error.
    """
    if isinstance(q, Fraction):
        return _round_to_nano(q)
    if isinstance(q, bool):  # bool is an int subclass; `cpu: true` is a mistake, not 1 core
        raise _invalid(q, "a boolean is not a quantity")
    if isinstance(q, int):
        return Fraction(q)
    if isinstance(q, float):
        if not math.isfinite(q):
            raise _invalid(q)
        # repr() is the shortest text that round-trips, i.e. what the JSON document said.
        return _parse_text(repr(q))
    if isinstance(q, str):
        text = q.strip()
        if not text:
            raise _invalid(q, "empty")
        return _parse_text(text)
    raise _invalid(q, f"expected a string or a number, got {type(q).__name__}")


def round_away_from_zero(x: Fraction) -> int:
    """The integer rounding of ``Quantity.Value()``: 1.2 -> 2, -1.2 -> -2, 3 -> 3."""
    return math.ceil(x) if x >= 0 else -math.ceil(-x)


def value(q: QuantityLike) -> int:
    """``Quantity.Value()``: the quantity as an integer, fractions rounded away from zero."""
    return round_away_from_zero(parse_quantity(q))


def milli_value(q: QuantityLike) -> int:
    """``Quantity.MilliValue()``: the quantity times 1000, fractions rounded away from zero."""
    return round_away_from_zero(parse_quantity(q) * 1000)


__all__ = ["QuantityLike", "milli_value", "parse_quantity", "round_away_from_zero", "value"]
