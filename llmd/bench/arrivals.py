"""When requests are sent: Poisson, gamma (bursty), fixed-rate, or all at once.

Real traffic is neither evenly spaced nor all at once; the gamma family covers both
(burstiness 1 is Poisson, below 1 burstier, above 1 steadier) and a seed fixes the draw.
"""

from __future__ import annotations

import math
import random

from llmd.bench.positive_number import positive_number
from llmd.errors import InvalidParameterError

ARRIVAL_KINDS = ("poisson", "gamma", "fixed")


def parse_rate(text: str) -> float:
    """A request rate in requests per second; "inf" means send everything at once."""
    return positive_number(
        text,
        "request_rate",
        not_a_number=f"request rate must be a number or inf: {text!r}",
        not_positive=f"request rate must be positive, got {text}",
    )


def arrival_offsets(
    num_requests: int,
    request_rate: float,
    kind: str = "poisson",
    burstiness: float = 1.0,
    seed: int = 0,
) -> list[float]:
    """Send times in seconds from the start, one per request, non-decreasing, first at 0.

    Gaps are gamma-distributed with mean 1/rate and shape `burstiness` (Poisson when it is
    1); `fixed` spaces them exactly 1/rate apart; an infinite rate sends all at time 0.
    """
    if kind not in ARRIVAL_KINDS:
        raise InvalidParameterError(f"arrival kind must be one of {ARRIVAL_KINDS}", "arrival")
    if not burstiness > 0:
        raise InvalidParameterError(f"burstiness must be positive, got {burstiness}", "burstiness")
    if num_requests <= 0:
        return []
    if math.isinf(request_rate):
        return [0.0] * num_requests
    mean_gap = 1.0 / request_rate
    if kind == "fixed":
        return [index * mean_gap for index in range(num_requests)]
    shape = 1.0 if kind == "poisson" else burstiness
    rng = random.Random(seed)
    offsets = [0.0]
    for _ in range(num_requests - 1):
        offsets.append(offsets[-1] + rng.gammavariate(shape, mean_gap / shape))
    return offsets
