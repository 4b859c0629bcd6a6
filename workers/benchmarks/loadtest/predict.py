"""What the planner predicts for a load test: the TTFT knee of a sample on a pool of FIFO servers
of known costs (``cost_model_knee``). Against the simulated replica configured with
``ReplicaConfig.fifo_slots`` the two describe the same queue (see ``docs/loadtesting.md``).

Units: requests per second, seconds, tokens per second.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from planner.capacity.search import KneeSearch, search_knee
from planner.capacity.simulation import Requests, latency_quantile, open_loop_times
from planner.capacity.slo import FIRST_POINT_UTILISATION
from planner.capacity.workload import request_cost
from planner.errors import PlannerInputError
from workers.benchmarks.loadtest.report import positive, quantile_level
from workers.benchmarks.workload import RequestSample

__all__ = ["cost_model_knee"]


def cost_model_knee(
    sample: RequestSample,
    unit_arrivals_s: npt.ArrayLike,
    *,
    servers: int,
    prefill_tokens_per_s: float,
    decode_tokens_per_s: float,
    target_ttft_s: float,
    quantile: float = 0.95,
    first_rate: float | None = None,
    upper_rate: float | None = None,
    rel_tol: float = 0.02,
    max_points: int = 64,
) -> KneeSearch:
    """The TTFT knee the planner's queue simulator predicts for ``sample`` on a pool of
    ``servers`` FIFO servers with per-server rates ``prefill_tokens_per_s`` and
    ``decode_tokens_per_s`` (no prefix cache: a cold run).

    A request's service time is ``request_cost(prompt, output, prefill, decode)``; it waits
    for a server as ``planner.capacity.simulation.open_loop_times`` says, and its first token
    comes after its prefill and one decode token: TTFT = wait + prompt/prefill + 1/decode.
    Arrivals at rate λ are ``unit_arrivals_s / λ``. By default the search starts at 0.7 × the
    sample's saturation rate (servers / mean service), as ``find_knee`` on the simulated
    replica does.
    """
    pool = servers
    if isinstance(pool, bool) or not isinstance(pool, int) or pool < 1:
        raise PlannerInputError("servers", f"must be a whole number >= 1, got {servers!r}")
    prefill = positive("prefill_tokens_per_s", prefill_tokens_per_s)
    decode = positive("decode_tokens_per_s", decode_tokens_per_s)
    target = positive("target_ttft_s", target_ttft_s)
    level = quantile_level(quantile)
    unit = np.ascontiguousarray(unit_arrivals_s, dtype=np.float64)
    if unit.shape != (sample.count,):
        raise PlannerInputError("unit_arrivals_s", "must hold one arrival time per request")
    prompt = sample.prompt_tokens.astype(np.float64)
    output = sample.output_tokens.astype(np.float64)
    service = np.array(
        [request_cost(p, o, prefill, decode) for p, o in zip(prompt, output, strict=True)]
    )
    requests = Requests.from_arrays(service)
    first_token_after_start = prompt / prefill + 1.0 / decode
    saturation = pool * sample.count / float(np.sum(service))

    def meets(rate: float) -> bool:
        arrival = unit / rate
        start, _ = open_loop_times(requests, arrival, pool)
        ttft = start - arrival + first_token_after_start
        return latency_quantile(ttft, level) <= target

    return search_knee(
        meets,
        first_rate=FIRST_POINT_UTILISATION * saturation if first_rate is None else first_rate,
        upper_rate=saturation if upper_rate is None else upper_rate,
        rel_tol=rel_tol,
        max_points=max_points,
    )
