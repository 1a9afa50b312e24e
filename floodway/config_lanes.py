"""Request lanes (`Lane`, `Route.lanes`): an endpoint's traffic split by request cost, so
that a few expensive requests cannot hold up the cheap ones (no head-of-line blocking).

A request goes to the first lane whose bounds it fits: at most `max_tokens` estimated tokens
summed over its inputs (`floodway.routers.tokens`: UTF-8 bytes / 4 plus specials, capped at
the build's `max_seq_len`; 1 per input that is not text) and at most `max_rows` inputs. The
last lane has no bound: it takes the rest. Each lane is served by containers of its own
(at least `min_containers`, at most `max_containers`; unset: the endpoint's `WarmPool`) with
its own queue (`queue_share` of `Route.max_queue`), batcher, estimators and warm target, so
`decide()` plans a short request against the short lane's queue and containers only: the
fast path / slow path split of serving practice, since a batch is as slow as its longest
input (`floodway.routers.service`: batch seconds grow with padded tokens). Re-exported by
`floodway.config`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from floodway.checks import Config as _Config
from floodway.checks import check_int, check_num
from floodway.errors import Problem

LANE_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")
MAX_LANES = 8
LANE_CONTAINERS_LIMIT = 1000   # = config.MAX_CONTAINERS_LIMIT (not imported: no cycle)


@dataclass(frozen=True)
class Lane(_Config):
    """One lane of an endpoint (see the module). `name`: lowercase, shown in the
    ``X-Floodway-Lane`` answer header, `/metrics` (label ``lane``) and `/readyz`.
    `max_tokens`, `max_rows`: the most a request of this lane costs (None: no bound; the
    last lane has neither). `queue_share`: its share of `Route.max_queue`, in (0, 1] (None:
    an equal part of what the lanes with a share leave). `min_containers`,
    `max_containers`: its own containers (None: the endpoint's `WarmPool` values)."""

    name: str
    max_tokens: int | None = None
    max_rows: int | None = None
    queue_share: float | None = None
    min_containers: int | None = None
    max_containers: int | None = None

    @property
    def bounded(self) -> bool:
        return self.max_tokens is not None or self.max_rows is not None

    def fits(self, tokens: int, rows: int) -> bool:
        """Whether a request of `tokens` estimated tokens and `rows` inputs is this lane's."""
        return (self.max_tokens is None or tokens <= self.max_tokens) and \
            (self.max_rows is None or rows <= self.max_rows)

    def _check(self, out: list[Problem], p: str) -> None:
        if not isinstance(self.name, str) or not LANE_NAME_RE.match(self.name):
            out.append(Problem(f"{p}.name", self.name,
                               "1-31 characters: a lowercase letter, then lowercase letters, "
                               "digits, '-' or '_'"))
        if self.max_tokens is not None:
            check_int(out, f"{p}.max_tokens", self.max_tokens, 1, 1 << 30)
        if self.max_rows is not None:
            check_int(out, f"{p}.max_rows", self.max_rows, 1, 1_000_000)
        if self.queue_share is not None:
            check_num(out, f"{p}.queue_share", self.queue_share, 0, 1, lo_open=True)
        for field in ("min_containers", "max_containers"):
            if (v := getattr(self, field)) is not None:
                check_int(out, f"{p}.{field}", v, 0 if field == "min_containers" else 1,
                          LANE_CONTAINERS_LIMIT)
        lo, hi = self.min_containers, self.max_containers
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            out.append(Problem(f"{p}.min_containers", lo,
                               f"at most {p}.max_containers ({hi})"))


def check_lanes(out: list[Problem], p: str, lanes: object) -> None:
    """The problems of `Route.lanes` (field path `p`): none, or 2..MAX_LANES `Lane`s with
    distinct names, every one but the last bounded, the last unbounded, queue shares that
    sum to at most 1."""
    if not isinstance(lanes, tuple) or not all(isinstance(x, Lane) for x in lanes):
        out.append(Problem(p, lanes, "a tuple of fw.Lane"))
        return
    if not lanes:
        return
    if not 2 <= len(lanes) <= MAX_LANES:
        out.append(Problem(p, lanes, f"no lanes, or 2..{MAX_LANES} of them (one lane is the "
                                     "endpoint itself)"))
    names = [lane.name for lane in lanes]
    if len(set(names)) != len(names):
        out.append(Problem(p, names, "lanes with distinct names"))
    for i, lane in enumerate(lanes):
        lane._check(out, f"{p}[{i}]")
        last = i == len(lanes) - 1
        if last and lane.bounded:
            out.append(Problem(f"{p}[{i}]", lane, "the last lane without max_tokens or "
                                                  "max_rows: it takes every other request"))
        elif not last and not lane.bounded:
            out.append(Problem(f"{p}[{i}]", lane, "a bound (max_tokens or max_rows): only "
                                                  "the last lane takes every request"))
    for i, lane in enumerate(lanes[:-1]):
        earlier = next((e for e in lanes[:i] if _covers(e, lane)), None)
        if earlier is not None:
            out.append(Problem(f"{p}[{i}]", lane, f"a lane some request can take: every "
                                                  f"request it would take fits lane "
                                                  f"{earlier.name!r} first (order lanes "
                                                  "from the tightest bounds to the widest)"))
    shares = [lane.queue_share for lane in lanes if isinstance(lane.queue_share, int | float)]
    if sum(shares) > 1 + 1e-9:
        out.append(Problem(f"{p}.queue_share", shares, "shares that sum to at most 1"))


def _covers(first: Lane, later: Lane) -> bool:
    """Whether every request `later` would take fits `first` (so `later` is never chosen)."""
    def wider(a: int | None, b: int | None) -> bool:
        return a is None or (isinstance(a, int) and isinstance(b, int) and b <= a)
    return wider(first.max_tokens, later.max_tokens) and wider(first.max_rows, later.max_rows)


def queue_shares(lanes: tuple[Lane, ...]) -> tuple[float, ...]:
    """Each lane's share of `Route.max_queue`: its own, or an equal part of what the lanes
    with a share leave (at least 0)."""
    given = sum(lane.queue_share or 0.0 for lane in lanes)
    unset = sum(1 for lane in lanes if lane.queue_share is None)
    rest = max(0.0, 1.0 - given) / unset if unset else 0.0
    return tuple(lane.queue_share if lane.queue_share is not None else rest for lane in lanes)


__all__ = ["MAX_LANES", "Lane", "check_lanes", "queue_shares"]
