"""A simulated OpenAI-compatible replica: continuous batching by the token cost model.

The endpoint load test needs something to drive in tests and rehearsals that behaves like one
replica of a continuous-batching runtime (vLLM and most others) and whose capacity is known in
advance. This is that: it does the work the planner's cost model says a request costs.

- ``config``: ``ReplicaConfig``, the replica's speeds and limits.
- ``batching``: the model, ``BatchingEngine`` (continuous batching worked out exactly in time,
  on whatever clock its owner gives it) and its prefix cache.
- ``server``: the engine over HTTP, speaking the OpenAI streaming protocol in real time
  (``make_app``, ``serve``, ``ReplicaServer`` in a thread); ``process``: as a subprocess
  (``replica_server_process``); ``cli``: ``python -m workers.simulators.replica --help``.
- ``virtual``: the engine in virtual time behind the load generators' interface
  wall-clock time, however busy the machine.

Driven by either, ``max_concurrency`` = c with ``max_sequence_share`` = 1/c is exactly the
planner's c-server FIFO queue with service time request_cost at 1/c of the rates
(``ReplicaConfig.fifo_slots``); the endpoint load test's acceptance check rests on this.

Units: tokens, tokens per second, seconds.
"""

from workers.simulators.replica.batching import BatchingEngine, Emission, PrefixCache, block_hashes
from workers.simulators.replica.config import ReplicaConfig
from workers.simulators.replica.process import replica_server_process
from workers.simulators.replica.server import ReplicaServer, app_engine, make_app, serve
from workers.simulators.replica.virtual import VirtualReplicaPool

__all__ = [
    "BatchingEngine",
    "Emission",
    "PrefixCache",
    "ReplicaConfig",
    "ReplicaServer",
    "VirtualReplicaPool",
    "app_engine",
    "block_hashes",
    "make_app",
    "replica_server_process",
    "serve",
]
