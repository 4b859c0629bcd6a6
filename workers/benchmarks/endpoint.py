"""What the endpoint load test talks to and what it measures: the endpoint, one request's record,
and the interface of the load generators that send (``LoadPool``).

Plain data, no HTTP client: the control plane builds an ``Endpoint`` from a
``BenchmarkEndpoint`` and reads the reports without the bench extra (Ray, aiohttp) installed.
The generators are ``workers.benchmarks.loadgen.LoadGeneratorPool`` (Ray actors sending over
HTTP) or ``workers.simulators.replica.virtual.VirtualReplicaPool`` (the simulated replica in
virtual time).

Units: seconds, tokens.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy.typing as npt

from planner.errors import PlannerInputError
from workers.benchmarks.workload import RequestSample

__all__ = ["Api", "Endpoint", "LoadPool", "Outcome", "RequestRecord"]

Api = Literal["completions", "chat"]
Outcome = Literal["ok", "error", "timeout"]


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible endpoint: base URL (``http://host:port``, without ``/v1``), model
    name, which API to call, an optional bearer key and the per-request timeout (seconds).

    ``ignore_eos`` asks the runtime to generate exactly ``max_tokens`` (a vLLM and SGLang
    extension; turn it off for servers that refuse unknown fields).
    """

    base_url: str
    model: str
    api: Api = "completions"
    api_key: str | None = None
    timeout_s: float = 60.0
    ignore_eos: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.base_url, str) or not self.base_url.startswith(
            ("http://", "https://")
        ):
            raise PlannerInputError("base_url", f"must be an http(s) URL, got {self.base_url!r}")
        if not isinstance(self.model, str) or not self.model:
            raise PlannerInputError("model", f"must be a non-empty string, got {self.model!r}")
        if self.api not in ("completions", "chat"):
            raise PlannerInputError("api", f"must be completions or chat, got {self.api!r}")
        timeout = self.timeout_s
        if not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout <= 0:
            raise PlannerInputError("timeout_s", f"must be a finite number > 0, got {timeout!r}")

    @property
    def url(self) -> str:
        """The URL requests are posted to."""
        path = "/v1/chat/completions" if self.api == "chat" else "/v1/completions"
        return self.base_url.rstrip("/") + path

    def headers(self) -> dict[str, str]:
        """Request headers (content type, and the bearer key if any)."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def body(self, words: Sequence[str], max_tokens: int) -> bytes:
        """The JSON body of a streaming request for this prompt and output length."""
        text = " ".join(words)
        payload: dict[str, Any] = {"model": self.model}
        if self.api == "chat":
            payload["messages"] = [{"role": "user", "content": text}]
        else:
            payload["prompt"] = text
        payload |= {
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.ignore_eos:
            payload["ignore_eos"] = True
        return json.dumps(payload).encode()


@dataclass(frozen=True)
class RequestRecord:
    """What happened to one request. Times in seconds from the run's start (NaN: never);
    token counts -1 when the server did not say; ``user`` the closed-loop client that sent it
    (-1 in an open loop)."""

    index: int
    scheduled_s: float
    sent_s: float
    first_token_s: float
    done_s: float
    output_tokens: int
    prompt_tokens: int
    cached_tokens: int
    outcome: Outcome
    detail: str = ""
    user: int = -1

    @property
    def ttft_s(self) -> float:
        """Time to first token from the send (NaN without one)."""
        return self.first_token_s - self.sent_s

    @property
    def e2e_s(self) -> float:
        """Send to end of stream (NaN unless ok)."""
        return self.done_s - self.sent_s if self.outcome == "ok" else math.nan

    @property
    def itl_s(self) -> float:
        """Mean time between output tokens after the first (NaN with fewer than two)."""
        if self.outcome != "ok" or self.output_tokens < 2:
            return math.nan
        return (self.done_s - self.first_token_s) / (self.output_tokens - 1)


class LoadPool(Protocol):
    """Load generators a load test sends through: open-loop and closed-loop runs of a sample,
    the warm-up of a warm run, and the hosts they run on (for provenance)."""

    @property
    def hosts(self) -> tuple[str, ...]: ...

    def run_open(
        self,
        endpoint: Endpoint,
        sample: RequestSample,
        offsets_s: npt.ArrayLike,
        *,
        run_key: int,
    ) -> list[RequestRecord]:
        """Send request i at ``offsets_s[i]`` seconds from the start; records in request
        order."""
        ...

    def run_closed(
        self, endpoint: Endpoint, sample: RequestSample, users: int, *, run_key: int
    ) -> list[RequestRecord]:
        """Send from ``users`` clients, each sending its next request when its previous one
        completed; records in request order."""
        ...

    def warm_up(
        self, endpoint: Endpoint, sample: RequestSample, run_key: int
    ) -> list[RequestRecord]:
        """Cache each sharing class's common prefix on the endpoint."""
        ...
