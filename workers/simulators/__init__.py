"""Stand-ins for real systems, to test and rehearse against: they import ``planner`` (and the
benchmark workers' plain workload code) only, never Django.

- ``fleet``: a simulated vLLM fleet's ``/metrics`` and its Prometheus query API
  (``python -m workers.simulators.fleet``).
- ``replica``: one simulated OpenAI-compatible replica, continuous batching by the token cost
  model, over HTTP (``python -m workers.simulators.replica``) or in virtual time.
- ``webhook_receiver``: a signed-webhook receiver that can be told to fail
  (``python -m workers.simulators.webhook_receiver``).
"""
