"""Benchmarks that measure what one replica of a shape sustains. They import ``planner`` only,
never Django: they take plain inputs and return plain dataclasses.

- ``engine``: the engine benchmark. A Llama-style decoder with random weights of the model's
  dimensions, in PyTorch: prefill and decode throughput, the KV-bound concurrency, and each as
  a fraction of the hardware roofline (``config``, ``model``, ``results``, ``harness``, ``cli``).
- ``ray_runner``: runs the engine benchmark as a Ray task that asks for the shape's GPUs, on a
  local Ray or a cluster.
- ``loadtest``, ``loadgen``, ``endpoint``, ``workload``: the endpoint load test (the simulated
  replica it is checked against is ``workers.simulators.replica``).

The control plane records results (``controlplane.benchmarks.runs``).
"""
