"""Endpoint load test: what one replica sustains at the tier's p95 TTFT target, measured over HTTP.

The planner sizes fleets from per-replica capacity figures; this package measures one against a
live OpenAI-compatible streaming endpoint (vLLM and most runtimes, or the simulated replica in
``workers.simulators.replica``), the way the seeds' load-test plan asks:

* requests follow the tenant classes' workload profiles (``workload.sample_requests``: sampled
  prompt and output lengths, ``max_tokens`` = the sampled output with ``ignore_eos``), never one
  canned prompt;
* arrivals are open loop: Poisson (``cv`` = 1) or bursty gamma gaps with coefficient of
  variation ``cv`` > 1, sent on schedule whatever the endpoint does (``loadgen``: Ray actors,
  each with a share of the schedule, so the load can exceed one machine);
* the cache state is controlled: a cold run shares no prefix (every prompt's text is unique to
  the run and request); a warm run first caches each class's common prefix, then the profile's
  hit rate of requests reuse it;
* TTFT, inter-token latency (per request: the mean gap between output tokens after the first)
  and end-to-end latency are reported at p50/p95/p99, overall and per class, with errors,
  timeouts and goodput (requests whose TTFT met the target, per second).

Modules: ``report`` (one run's report), ``sweep`` (runs and the knee, ``find_knee``, by
``planner.capacity.search.search_knee``), ``rates`` (the token-rate probes), ``predict`` (the
planner's prediction of the knee, ``cost_model_knee``), ``plan`` (one whole test from plain
inputs, ``load_test_run``) and ``cli`` (``python -m workers.benchmarks.loadtest --help`` runs a
sweep against any endpoint and prints the report as JSON). The generators are any ``LoadPool``
(``workers.benchmarks.endpoint``). Recording a test as a benchmark run and a capacity figure is
the control plane's (``controlplane.benchmarks.runs``).

Units: requests per second, seconds, tokens.
"""

from workers.benchmarks.loadtest.plan import (
    LoadTestPlan,
    LoadTestResult,
    load_test_run,
    load_test_software,
    load_test_workload,
)
from workers.benchmarks.loadtest.predict import cost_model_knee
from workers.benchmarks.loadtest.rates import TokenRates, measure_token_rates, steady_token_rates
from workers.benchmarks.loadtest.report import (
    DEFAULT_MAX_ERROR_SHARE,
    CacheState,
    LatencyPercentiles,
    LoadTestFailed,
    RunReport,
    StageLatencies,
    summarize_run,
)
from workers.benchmarks.loadtest.sweep import (
    KneeReport,
    SweepPoint,
    find_knee,
    run_closed_loop,
    run_open_loop,
)

__all__ = [
    "DEFAULT_MAX_ERROR_SHARE",
    "CacheState",
    "KneeReport",
    "LatencyPercentiles",
    "LoadTestFailed",
    "LoadTestPlan",
    "LoadTestResult",
    "RunReport",
    "StageLatencies",
    "SweepPoint",
    "TokenRates",
    "cost_model_knee",
    "find_knee",
    "load_test_run",
    "load_test_software",
    "load_test_workload",
    "measure_token_rates",
    "run_closed_loop",
    "run_open_loop",
    "steady_token_rates",
    "summarize_run",
]
