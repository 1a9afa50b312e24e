"""Admission: what the router decides about a request before the dispatch decision.

Pure and clock-injected (every time is a `now_s` argument, in seconds of a monotonic clock),
so the HTTP layer supplies the clock and tests need no sleeps.

    X-Priority: high|normal|low       -> `parse_priority`   (400 on anything else)
    X-Deadline-Ms: <integer ms>       -> `parse_deadline`   (400 on anything else)
    Authorization: Bearer <API key>   -> `tenant_of`        (401 when keys are configured)
    per-tenant request rate           -> `TenantLimiter`    (seconds to wait, for 429 Retry-After)

A header whose value is empty (or only whitespace) counts as missing: proxies forward empty
headers, and an empty value carries no choice to refuse.

Tenants are named by `key_id`, a short hash of the API key, so that keys never reach logs or
metric labels. Without configured keys, a bearer token still names a tenant but is not checked,
so a client can rotate tokens to get fresh buckets: per-tenant limits only bind with keys.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from floodway.errors import FloodwayError, RequestError, Unauthorized

API_KEYS_ENV = "FLOODWAY_API_KEYS"
ANONYMOUS = "anonymous"

# RFC 6750 section 2.1, b64token: the characters a bearer token may hold. A configured key
# outside it could never be sent, so it is refused when configured, not silently unmatched.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# A deadline is plain ASCII digits: int() would also take "+5", "1_000", " 5" and non-ASCII
# digits, none of which a client should rely on.
_DIGITS = re.compile(r"[0-9]+")


def _shown(value: str) -> str:
    """`value` quoted for an error message, cut short so a client cannot make it huge."""
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


class Priority(IntEnum):
    """How urgent a request is; higher values are served first when work must wait."""

    LOW = 0
    NORMAL = 1
    HIGH = 2


def parse_priority(header: str | None) -> Priority:
    """The priority named by an ``X-Priority`` header: high, normal or low.

    Case-insensitive, surrounding whitespace ignored; missing or empty gives NORMAL.
    Raises RequestError(400, field "X-Priority") naming the bad value and the allowed ones.
    """
    value = (header or "").strip()
    if not value:
        return Priority.NORMAL
    try:
        return Priority[value.upper()]
    except KeyError:
        raise RequestError(f"X-Priority: {_shown(value)} is not a priority; allowed: high, "
                           "normal, low (default normal)", status=400,
                           field="X-Priority") from None


def parse_deadline(header: str | None, *, default_s: float, max_s: float = 3600) -> float:
    """The deadline, in seconds from arrival, given by an ``X-Deadline-Ms`` header.

    The value is a whole number of milliseconds from 1 to ``max_s * 1000`` (ASCII digits
    only: "1.5", "1e3", "+5" and "-1" are refused, so that a client's unit mistake is caught
    rather than rounded). Missing or empty gives `default_s` (the route's `timeout_s`).
    Raises RequestError(400, field "X-Deadline-Ms") naming the bad value and the range.
    """
    value = (header or "").strip()
    if not value:
        return default_s
    max_ms = math.floor(max_s * 1000)
    bad = RequestError(f"X-Deadline-Ms: {_shown(value)} is not allowed; allowed: a whole number "
                       f"of milliseconds from 1 to {max_ms}", status=400, field="X-Deadline-Ms")
    # The length check first: int() of a very long digit string is slow (and refused past
    # 4300 digits), and anything this long is out of range anyway.
    if not _DIGITS.fullmatch(value) or len(value.lstrip("0")) > len(str(max_ms)):
        raise bad
    ms = int(value)
    if not 1 <= ms <= max_ms:
        raise bad
    return ms / 1000


class TokenBucket:
    """A token bucket: holds at most `burst` tokens and gains `rate_per_s` tokens per second.

    A request costing `n` tokens is admitted when the bucket holds at least `n`, which are
    then removed; otherwise nothing is removed and the caller learns how long until `n` will
    be there. So on average `rate_per_s` requests per second pass, and up to `burst` at once
    after a quiet spell. The bucket starts full. This is the classic token bucket (e.g. the
    committed-rate bucket of RFC 2697, and Envoy's local rate limit filter), refilled lazily
    from the time passed since the last call instead of by a timer.
    """

    __slots__ = ("rate_per_s", "burst", "_tokens", "_last_s")

    def __init__(self, rate_per_s: float, burst: int):
        if not rate_per_s > 0 or not math.isfinite(rate_per_s):
            raise ValueError(f"rate_per_s must be a positive number, got {rate_per_s!r}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst!r}")
        self.rate_per_s = float(rate_per_s)
        self.burst = burst
        self._tokens = float(burst)
        self._last_s: float | None = None

    def level(self, now_s: float) -> float:
        """Tokens in the bucket at `now_s` (seconds), without taking any."""
        if self._last_s is None:
            return self._tokens
        # A clock that steps back must not drain the bucket: no refill, no negative time.
        elapsed = max(0.0, now_s - self._last_s)
        return min(float(self.burst), self._tokens + elapsed * self.rate_per_s)

    def take(self, now_s: float, n: float = 1) -> float:
        """Take `n` tokens at `now_s` (seconds).

        Returns 0.0 when admitted (the tokens are removed), else the seconds until `n` tokens
        will be there (nothing removed). Raises ValueError when `n` is not in (0, burst]: such
        a request could never be admitted, and the caller must refuse or split it.
        """
        if not 0 < n <= self.burst:
            raise ValueError(f"n must be in (0, {self.burst}], got {n!r}")
        self._tokens = self.level(now_s)
        self._last_s = now_s if self._last_s is None else max(self._last_s, now_s)
        # A hair of slack: refilling by elapsed * rate in floating point can land just below
        # a whole token (0.1 s at 10/s), which would refuse with a wait of ~1e-17 s.
        if self._tokens + 1e-9 >= n:
            self._tokens = max(0.0, self._tokens - n)
            return 0.0
        return (n - self._tokens) / self.rate_per_s


class TenantLimiter:
    """One token bucket per tenant: `rate_per_s` requests per second, bursts of `burst`.

    `rate_per_s` None means unlimited (nothing is stored). Memory is bounded: at most
    `max_tenants` buckets are kept and, beyond that, the least recently used one is dropped.
    A dropped tenant comes back with a full bucket, which is exact when its bucket had refilled,
    and the least recently used bucket is the one idle longest, so the most likely to be full
    (it is certainly full once idle for burst / rate_per_s seconds). Build one per route:
    `TenantLimiter.for_route(route)`.
    """

    def __init__(self, rate_per_s: float | None, burst: int, *, max_tenants: int = 10_000):
        if max_tenants < 1:
            raise ValueError(f"max_tenants must be at least 1, got {max_tenants!r}")
        if rate_per_s is not None:
            TokenBucket(rate_per_s, burst)   # the same argument checks, now, not per tenant
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.max_tenants = max_tenants
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    @classmethod
    def for_route(cls, route: Any, *, max_tenants: int = 10_000) -> TenantLimiter:
        """The limiter a `floodway.Route` asks for (tenant_rate_per_s, tenant_burst)."""
        return cls(route.tenant_rate_per_s, route.tenant_burst, max_tenants=max_tenants)

    def __len__(self) -> int:
        return len(self._buckets)

    def check(self, tenant: str, now_s: float) -> float:
        """Admit one request of `tenant` at `now_s` (seconds).

        Returns 0.0 when admitted, else the seconds to wait (answer 429 with a Retry-After of
        that, rounded up to whole seconds per RFC 9110 section 10.2.3).
        """
        if self.rate_per_s is None:
            return 0.0
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = TokenBucket(self.rate_per_s, self.burst)
            while len(self._buckets) > self.max_tenants:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(tenant)
        return bucket.take(now_s)


def key_id(token: str) -> str:
    """A short id for a bearer token: "key-" and the first 12 hex digits of its SHA-256.

    Safe to log and to use as a metric label: it does not reveal a randomly generated key.
    48 bits keep accidental collisions negligible for any realistic number of keys.
    """
    return "key-" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _check_key(key: str, where: str) -> None:
    if not _B64TOKEN.fullmatch(key):
        # The key itself is not shown: it is a secret, and the message may reach a log.
        raise FloodwayError(f"{where} is not a valid bearer token: use only letters, digits "
                            "and - . _ ~ + / (optionally ending in =)")


@dataclass(frozen=True, repr=False)
class ApiKeys:
    """The accepted bearer tokens (API keys); empty means no authentication.

    Build from a list, ``ApiKeys(["k1", "k2"])``, or from the environment with
    `ApiKeys.from_env` (``FLOODWAY_API_KEYS``, comma-separated). Surrounding whitespace and
    blank entries are dropped. Raises FloodwayError for a key that could not be sent as a
    bearer token (RFC 6750 section 2.1), without showing the key. The repr shows key ids only.
    """

    keys: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if isinstance(self.keys, str):   # iterating it would accept each character as a key
            raise TypeError("ApiKeys takes a list of keys, not one string")
        keys = [k.strip() for k in self.keys]
        keys = [k for k in keys if k]
        for i, k in enumerate(keys, 1):
            _check_key(k, f"API key #{i}")
        object.__setattr__(self, "keys", frozenset(keys))

    @classmethod
    def from_env(cls, extra: Iterable[str] = (), *,
                 environ: Mapping[str, str] | None = None) -> ApiKeys:
        """The keys in ``FLOODWAY_API_KEYS`` (comma-separated) plus `extra` (e.g. --api-key)."""
        env = os.environ if environ is None else environ
        from_env = [k.strip() for k in env.get(API_KEYS_ENV, "").split(",")]
        from_env = [k for k in from_env if k]
        for i, k in enumerate(from_env, 1):
            _check_key(k, f"{API_KEYS_ENV} entry #{i}")
        extra = [k.strip() for k in extra]
        extra = [k for k in extra if k]
        for i, k in enumerate(extra, 1):
            _check_key(k, f"--api-key #{i}")
        return cls(frozenset([*from_env, *extra]))

    def __bool__(self) -> bool:
        return bool(self.keys)

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"ApiKeys({sorted(key_id(k) for k in self.keys)})"

    def accepts(self, token: str) -> bool:
        """Whether `token` is one of the keys, compared in constant time per key."""
        if not _B64TOKEN.fullmatch(token):
            return False   # also keeps non-ASCII out of compare_digest on str
        given = token.encode("ascii")
        found = False
        for k in self.keys:
            # Every key is compared, so the time taken does not tell which one matched.
            found |= hmac.compare_digest(given, k.encode("ascii"))
        return found


def tenant_of(authorization: str | None, keys: ApiKeys) -> str:
    """The tenant a request belongs to, from its ``Authorization`` header.

    With keys configured, the header must be ``Bearer <key>`` (scheme case-insensitive,
    RFC 7235 section 2.1) with an accepted key; the tenant is `key_id` of the key. Otherwise
    raises Unauthorized (401, field "Authorization"), whose message never repeats the
    credential. Without keys nothing is checked: a bearer token names its tenant by `key_id`,
    and any other request is "anonymous".
    """
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    is_bearer = scheme.lower() == "bearer" and bool(token)
    if not keys:
        return key_id(token) if is_bearer else ANONYMOUS
    if not authorization or not authorization.strip():
        raise Unauthorized("missing Authorization header: send 'Authorization: Bearer <API key>'")
    if not is_bearer:
        # Neither part is shown: a client that forgot the scheme sent its key as the first.
        raise Unauthorized("Authorization header is not of the form 'Bearer <API key>'")
    if not keys.accepts(token):
        raise Unauthorized("the bearer token is not an accepted API key", error="invalid_token")
    return key_id(token)


__all__ = [
    "ANONYMOUS", "API_KEYS_ENV", "ApiKeys", "Priority", "TenantLimiter", "TokenBucket", "key_id",
    "parse_deadline", "parse_priority", "tenant_of",
]
