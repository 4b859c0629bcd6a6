"""Benchmarks that measure what one replica of a shape sustains.

- ``engine``: the engine benchmark. A Llama-style decoder with random weights of the model's
  dimensions, in PyTorch: prefill and decode throughput, the KV-bound concurrency, and each as
  a fraction of the hardware roofline. Imports torch, never Django.
- ``ray_runner``: runs the engine benchmark as a Ray task that asks for the shape's GPUs, on a
  local Ray or a cluster.
- ``loadtest``, ``replica_server``, ``loadgen``, ``workload``: the endpoint load test.

The control plane stores results through ``controlplane.benchmarks.services``.
"""
