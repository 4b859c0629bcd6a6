"""What the endpoint load test sends: request lengths sampled from workload profiles, and prompts.

A load test that sends one canned prompt measures a workload nobody has. Each request here
belongs to a tenant class and draws its prompt and output lengths from that class's
``WorkloadProfile`` percentiles:

* lengths are lognormal, fitted to the profile's p50 and mean with
  ``planner.capacity.workload.lognormal_from_median_mean`` (the mean-to-median ratio fixes the
  spread), then clipped to ``clip_multiple`` × the profile's measured p99 (the fit knows nothing
  of the measured tail, and one 200,000-token draw would dominate a short run) and rounded to
  whole tokens, at least 1;
* the class of each request is drawn by share, as ``planner.capacity.simulation`` draws it;
* in a warm run each request of a class shares that class's common prefix with probability
  equal to the profile's prefix-cache hit rate; a cold run shares nothing.

Prompts are built with the sampled token count from a vocabulary of short common English words,
chosen because byte-pair tokenizers usually hold such words, with their leading space, as one
token (not checked against any one tokenizer). A real endpoint then sees about the sampled count
and reports the exact one in its usage; the simulated replica counts words, so it sees the
sampled count exactly. Every request's own text starts with a key unique to the run and the request, so a cold
run never hits a prefix cached by an earlier run. A shared prompt is the first
``tokens − UNIQUE_TAIL_TOKENS`` words of its class's common text followed by a unique tail (the
question after a shared system prompt and document).

Everything is seeded: the same seed gives the same classes, lengths and sharing, and the sample
does not depend on the arrival rate, so every rate of a sweep sends the same requests (common
random numbers). Arrivals are ``planner.capacity.simulation.unit_rate_arrivals`` scaled by the
rate, the stream the planner's own SLO search uses.

Units: tokens; shares and hit rates are fractions. Bad input raises ``PlannerInputError`` naming
the argument.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from planner.capacity.simulation import unit_rate_arrivals
from planner.capacity.workload import LognormalFit, lognormal_from_median_mean
from planner.errors import PlannerInputError

__all__ = [
    "DEFAULT_CLIP_MULTIPLE",
    "UNIQUE_TAIL_TOKENS",
    "VOCABULARY",
    "ClassProfile",
    "LengthProfile",
    "ProfileLike",
    "RequestSample",
    "TenantProfileLike",
    "checked_classes",
    "classes_from_profiles",
    "prompt_words",
    "request_key",
    "sample_requests",
    "shared_prefix_words",
    "unit_rate_arrivals",
]

#: Sampled lengths are clipped to this multiple of the profile's measured p99.
DEFAULT_CLIP_MULTIPLE = 2.0

#: Words at the end of a shared prompt that are the request's own (its question).
UNIQUE_TAIL_TOKENS = 16

# Shares are typed by people as rounded fractions; a mix whose shares sum to 1 within this is
# accepted.
_SHARE_SUM_TOL = 1e-6

# Independent random streams of one seed (the planner's simulator uses 1 and 2 for its
# requests and arrivals; arrivals here are its stream 2, so the same seed gives the same
# arrival times in both).
_CLASS_STREAM = 11
_LENGTH_STREAM = 12
_SHARING_STREAM = 13
_TEXT_STREAM = 14

#: Short common English words, the kind byte-pair vocabularies usually hold whole (with the
#: leading space), so a prompt of N words is close to N tokens on a real endpoint; the
#: simulated replica counts words.
VOCABULARY: tuple[str, ...] = tuple(
    """
    the of and to in is it you that he was for on are with as his they be at one have this
    from or had by hot word but what some we can out other were all there when up use your
    how said an each she which do their time if will way about many then them write would
    like so these her long make thing see him two has look more day could go come did number
    sound no most people my over know water than call first who may down side been now find
    any new work part take get place made live where after back little only round man year
    came show every good me give our under name very through just form great think say help
    low line differ turn cause much mean before move right boy old too same tell does set
    three want air well also play small end put home read hand port large spell add even land
    here must big high such follow act why ask men change went light kind off need house
    picture try us again animal point mother world near build self earth father head stand
    own page should country found answer school grow study still learn plant cover food sun
    four between state keep eye never last let thought city tree cross farm hard start might
    story saw far sea draw left late run while press close night real life few north open
    seem together next white children begin got walk example ease paper group always music
    those both mark often letter until mile river car feet care second book carry took
    """.split()
)

_WORDS = np.array(VOCABULARY, dtype=object)


class ProfileLike(Protocol):
    """The fields of ``controlplane.policies.models.WorkloadProfile`` the load test reads."""

    prompt_tokens_p50: float
    prompt_tokens_mean: float
    prompt_tokens_p99: float
    output_tokens_p50: float
    output_tokens_mean: float
    output_tokens_p99: float
    prefix_cache_hit_rate: float


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PlannerInputError(name, f"must be a finite number, got {value!r}")
    if value <= 0:
        raise PlannerInputError(name, f"must be > 0, got {value!r}")
    return float(value)


def _fraction(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PlannerInputError(name, f"must be a finite number, got {value!r}")
    if not 0 <= value <= 1:
        raise PlannerInputError(name, f"must be in [0, 1], got {value!r}")
    return float(value)


@dataclass(frozen=True)
class LengthProfile:
    """A token-length distribution as a profile states it: p50, mean and p99 (tokens)."""

    p50: float
    mean: float
    p99: float

    def __post_init__(self) -> None:
        _positive("p50", self.p50)
        _positive("mean", self.mean)
        _positive("p99", self.p99)
        if self.p99 < self.p50:
            raise PlannerInputError("p99", f"must be at least p50 {self.p50!r}, got {self.p99!r}")

    def fit(self) -> LognormalFit:
        """The lognormal through p50 and mean (raises naming ``mean`` if it is below p50)."""
        return lognormal_from_median_mean(self.p50, self.mean)


@dataclass(frozen=True)
class ClassProfile:
    """One tenant class in the load: its share of requests and its lengths and hit rate."""

    name: str
    share: float
    prompt: LengthProfile
    output: LengthProfile
    prefix_cache_hit_rate: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PlannerInputError("name", f"must be a non-empty string, got {self.name!r}")
        _fraction("share", self.share)
        _fraction("prefix_cache_hit_rate", self.prefix_cache_hit_rate)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClassProfile:
        """A class from JSON-like data, as ``as_dict`` writes it: ``name``, ``share``,
        ``prompt_tokens`` and ``output_tokens`` (each ``p50``, ``mean``, ``p99``) and an
        optional ``prefix_cache_hit_rate``. Missing or malformed fields raise
        ``PlannerInputError`` naming them."""
        if not isinstance(data, Mapping):
            raise PlannerInputError("classes", f"each class must be an object, got {data!r}")

        def lengths(key: str) -> LengthProfile:
            part = data.get(key)
            if not isinstance(part, Mapping) or not {"p50", "mean", "p99"} <= part.keys():
                raise PlannerInputError(key, "must be an object with p50, mean and p99")
            return LengthProfile(part["p50"], part["mean"], part["p99"])

        if "name" not in data or "share" not in data:
            raise PlannerInputError("classes", "each class needs a name and a share")
        return cls(
            name=data["name"],
            share=data["share"],
            prompt=lengths("prompt_tokens"),
            output=lengths("output_tokens"),
            prefix_cache_hit_rate=data.get("prefix_cache_hit_rate", 0.0),
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (``from_dict`` reads it back)."""
        return {
            "name": self.name,
            "share": self.share,
            "prompt_tokens": {
                "p50": self.prompt.p50,
                "mean": self.prompt.mean,
                "p99": self.prompt.p99,
            },
            "output_tokens": {
                "p50": self.output.p50,
                "mean": self.output.mean,
                "p99": self.output.p99,
            },
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
        }

    @classmethod
    def from_profile(cls, name: str, share: float, profile: ProfileLike) -> ClassProfile:
        """The class as a ``WorkloadProfile`` (or anything with its fields) describes it."""
        return cls(
            name=name,
            share=share,
            prompt=LengthProfile(
                profile.prompt_tokens_p50, profile.prompt_tokens_mean, profile.prompt_tokens_p99
            ),
            output=LengthProfile(
                profile.output_tokens_p50, profile.output_tokens_mean, profile.output_tokens_p99
            ),
            prefix_cache_hit_rate=profile.prefix_cache_hit_rate,
        )


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class TenantProfileLike(ProfileLike, Protocol):
    """A ``WorkloadProfile`` row: its fields, its tenant and class, and its peak rate."""

    peak_requests_per_s: float

    @property
    def tenant(self) -> _Named: ...

    @property
    def workload_class(self) -> _Named: ...


def classes_from_profiles(profiles: Sequence[TenantProfileLike]) -> tuple[ClassProfile, ...]:
    """The load of a model's current workload profiles (``controlplane.benchmarks.selectors.
    current_profiles``): one class per profile, named ``tenant/class``, with shares in
    proportion to the profiles' peak request rates (equal when every rate is 0), so the mix is
    the one the replica sees at peak."""
    rows = tuple(profiles)
    if not rows:
        raise PlannerInputError("profiles", "must hold at least one profile")
    weights = [max(0.0, float(p.peak_requests_per_s)) for p in rows]
    if sum(weights) <= 0:
        weights = [1.0] * len(rows)
    total = math.fsum(weights)
    named: dict[str, int] = {}
    classes = []
    for profile, weight in zip(rows, weights, strict=True):
        name = f"{profile.tenant.name}/{profile.workload_class.name}"
        # Two regions' profiles of one tenant and class: keep both, told apart by a number.
        named[name] = named.get(name, 0) + 1
        if named[name] > 1:
            name = f"{name}#{named[name]}"
        classes.append(ClassProfile.from_profile(name, weight / total, profile))
    return tuple(classes)


def checked_classes(classes: Sequence[ClassProfile]) -> tuple[ClassProfile, ...]:
    """``classes`` as a tuple after checking it is a mix: non-empty, unique names, shares sum
    to 1."""
    mix = tuple(classes)
    if not mix:
        raise PlannerInputError("classes", "must hold at least one class")
    for item in mix:
        if not isinstance(item, ClassProfile):
            raise PlannerInputError("classes", f"must hold ClassProfile items, got {item!r}")
    names = [c.name for c in mix]
    if len(set(names)) != len(names):
        raise PlannerInputError("classes", f"class names must be unique, got {names}")
    total = math.fsum(c.share for c in mix)
    if abs(total - 1.0) > _SHARE_SUM_TOL:
        raise PlannerInputError("classes", f"shares must sum to 1, got {total!r}")
    return mix


IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class RequestSample:
    """The requests of a load test in issue order: class, prompt and output tokens, and
    whether each shares its class's common prefix (only ever true in a warm run).

    ``seed`` is the sample's seed; prompts are built from it (``prompt_words``).
    """

    class_names: tuple[str, ...]
    class_index: IntArray = field(repr=False, compare=False)
    prompt_tokens: IntArray = field(repr=False, compare=False)
    output_tokens: IntArray = field(repr=False, compare=False)
    shares_prefix: BoolArray = field(repr=False, compare=False)
    seed: int = 0

    @property
    def count(self) -> int:
        """Number of requests."""
        return int(self.class_index.shape[0])

    def cold(self) -> RequestSample:
        """The same requests with no shared prefix: the cold-cache run."""
        return RequestSample(
            self.class_names,
            self.class_index,
            self.prompt_tokens,
            self.output_tokens,
            np.zeros(self.count, dtype=np.bool_),
            self.seed,
        )

    def shared_prefix_tokens(self) -> dict[int, int]:
        """Per class index with sharing requests: the longest shared part any of them uses,
        which is how much of the class's common text a warm-up must cache (tokens)."""
        longest: dict[int, int] = {}
        for i in np.flatnonzero(self.shares_prefix):
            k = int(self.class_index[i])
            part = int(self.prompt_tokens[i]) - UNIQUE_TAIL_TOKENS
            if part > 0:
                longest[k] = max(longest.get(k, 0), part)
        return longest


def _lengths(
    profile: LengthProfile, size: int, rng: np.random.Generator, clip_multiple: float
) -> IntArray:
    fit = profile.fit()
    raw = np.exp(fit.mu + fit.sigma * rng.standard_normal(size))
    clipped = np.minimum(raw, profile.p99 * clip_multiple)
    return np.maximum(1, np.rint(clipped)).astype(np.int64)


def sample_requests(
    classes: Sequence[ClassProfile],
    n: int,
    *,
    seed: int = 0,
    warm: bool = False,
    clip_multiple: float = DEFAULT_CLIP_MULTIPLE,
) -> RequestSample:
    """``n`` requests of a class mix: classes by share, then lengths, then prefix sharing.

    Draws for one class never depend on another class's, and sharing is drawn for every request
    even in a cold run (then cleared), so a cold and a warm sample of one seed hold the same
    requests and differ only in sharing.
    """
    mix = checked_classes(classes)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise PlannerInputError("n", f"must be a whole number >= 1, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise PlannerInputError("seed", f"must be a whole number >= 0, got {seed!r}")
    clip = _positive("clip_multiple", clip_multiple)
    if clip < 1:
        raise PlannerInputError("clip_multiple", f"must be at least 1, got {clip_multiple!r}")

    class_rng = np.random.default_rng([seed, _CLASS_STREAM])
    cumulative = np.cumsum([c.share for c in mix])
    index = np.searchsorted(cumulative, class_rng.random(n), side="left")
    # Shares summing to a hair under 1 leave a sliver past the last class: it belongs there.
    index = np.minimum(index, len(mix) - 1).astype(np.int64)

    prompt = np.empty(n, dtype=np.int64)
    output = np.empty(n, dtype=np.int64)
    shares = np.zeros(n, dtype=np.bool_)
    share_draw = np.random.default_rng([seed, _SHARING_STREAM]).random(n)
    for k, cls in enumerate(mix):
        picked = index == k
        size = int(picked.sum())
        # One stream per class: adding a class leaves the others' lengths unchanged.
        rng = np.random.default_rng([seed, _LENGTH_STREAM, k])
        prompt[picked] = _lengths(cls.prompt, size, rng, clip)
        output[picked] = _lengths(cls.output, size, rng, clip)
        shares[picked] = share_draw[picked] < cls.prefix_cache_hit_rate
    if not warm:
        shares[:] = False
    return RequestSample(tuple(c.name for c in mix), index, prompt, output, shares, seed)


# -- prompt text --------------------------------------------------------------------------------


def _key_words(*numbers: int) -> list[str]:
    """Numbers spelled in base len(VOCABULARY), four words each: a key made of vocabulary words."""
    base = len(VOCABULARY)
    words: list[str] = []
    for number in numbers:
        value = number % base**4
        for _ in range(4):
            value, digit = divmod(value, base)
            words.append(VOCABULARY[digit])
    return words


def request_key(run_key: int, index: int) -> list[str]:
    """The eight words that open request ``index``'s own text in run ``run_key``."""
    return _key_words(run_key, index)


def _filler(count: int, *stream: int) -> list[str]:
    if count <= 0:
        return []
    rng = np.random.default_rng(list(stream))
    picks = rng.integers(0, len(VOCABULARY), count)
    return list(_WORDS[picks])


def shared_prefix_words(sample_seed: int, run_key: int, class_index: int, tokens: int) -> list[str]:
    """The first ``tokens`` words of a class's common text in one run (its system prompt and
    shared document). Any length is a prefix of any longer one."""
    head = _key_words(run_key, 1_000_000 + class_index)
    body = _filler(max(0, tokens - len(head)), sample_seed, _TEXT_STREAM, run_key, class_index)
    return (head + body)[:tokens]


def prompt_words(sample: RequestSample, index: int, run_key: int) -> list[str]:
    """The words of request ``index``'s prompt, exactly ``sample.prompt_tokens[index]`` of them.

    ``run_key`` (any integer) makes the text unique to the run: two runs with different keys
    share no prefix, so a cold run finds nothing cached from an earlier one.
    """
    tokens = int(sample.prompt_tokens[index])
    k = int(sample.class_index[index])
    shared = tokens - UNIQUE_TAIL_TOKENS if bool(sample.shares_prefix[index]) else 0
    words = shared_prefix_words(sample.seed, run_key, k, shared) if shared > 0 else []
    own = tokens - len(words)
    key = request_key(run_key, index)[:own]
    words += key
    words += _filler(own - len(key), sample.seed, _TEXT_STREAM, run_key, 2_000_000 + index)
    return words
