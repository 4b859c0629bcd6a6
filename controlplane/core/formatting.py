"""Numbers rounded by what they mean, for the operators' pages and the admin alike.

Money to the cent, counts (replicas, GPUs) whole or to one decimal where fractional, rates and
other measured quantities to three significant figures. Floating-point residue (``8.9e-16``
left over from subtracting equal sums) reads as 0, and a value that is not a finite number
reads as a dash.
"""

from __future__ import annotations

import math
from typing import Any

# Below this a computed figure is residue, not a quantity: no count, price or rate the
# control plane handles is this small.
EPSILON = 1e-9
DASH = "—"


def finite(value: Any) -> float | None:
    """``value`` as a float with residue set to 0; None when it is not a finite number."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number):
        return None
    return 0.0 if abs(number) < EPSILON else number


def _trim(text: str) -> str:
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def number(value: Any, digits: int = 2) -> str:
    """Thousands separators and at most ``digits`` decimals, trailing zeros dropped
    (57.400000000000006 → 57.4); a small but real value keeps two significant digits
    (0.00042 → 0.00042, not 0)."""
    x = finite(value)
    if x is None:
        return DASH
    if digits > 0 and 0 < abs(x) < 10**-digits:
        return _trim(f"{x:.{max(digits, 1 - math.floor(math.log10(abs(x))))}f}")
    return _trim(f"{x:,.{digits}f}")


def money(value: Any) -> str:
    """Dollars with cents: 1,234.50 (162.35999999999999 → 162.36)."""
    x = finite(value)
    if x is None:
        return DASH
    text = f"{x:,.2f}"
    return "0.00" if text == "-0.00" else text


def count(value: Any) -> str:
    """Replicas or GPUs: whole when whole (3.0000000001 → 3), else one decimal (2.5)."""
    x = finite(value)
    if x is None:
        return DASH
    if abs(x - round(x)) < 0.05:
        return f"{round(x):,}"
    return _trim(f"{x:,.1f}")


def rate(value: Any, significant: int = 3) -> str:
    """A rate or measured quantity to ``significant`` figures: 0.017634 → 0.0176,
    1234.5 → 1,230, 12.0 → 12."""
    x = finite(value)
    if x is None:
        return DASH
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    decimals = significant - 1 - magnitude
    rounded = round(x, decimals)
    if decimals <= 0:
        return f"{int(rounded):,}"
    return _trim(f"{rounded:,.{decimals}f}")


def tidy(value: Any, significant: int = 10) -> Any:
    """A JSON-like structure with every float's residue rounded off (``significant`` figures,
    0.19999999999999 → 0.2, 8.9e-16 → 0.0), for showing stored documents whose fields mean
    different things; other values are left as they are."""
    if isinstance(value, float):
        x = finite(value)
        return value if x is None else float(f"{x:.{significant}g}")
    if isinstance(value, dict):
        return {key: tidy(item, significant) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [tidy(item, significant) for item in value]
    return value
