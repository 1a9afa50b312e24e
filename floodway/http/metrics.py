"""Prometheus metrics of a router, served on ``GET /metrics`` (prometheus_client).

    floodway_requests_total{endpoint, outcome}          counter
    floodway_request_seconds{endpoint, outcome}         histogram (router-side latency)
    floodway_containers{endpoint, lane, state}          gauge, read from the backend at scrape
    floodway_cold_start_seconds{endpoint, lane, phase, container}  gauge per live container
                                   (process_start, imports, artifact_load, warmup, total)
    floodway_queue_depth{endpoint, lane}                gauge: requests waiting for a slot
    floodway_queue_rows{endpoint, lane}                 gauge: rows waiting for a slot
    floodway_lane_decisions_total{endpoint, lane, action}  counter: decisions per lane
                                   (`lane` is "" for an endpoint without Route.lanes)
    floodway_decisions_total{endpoint, action}          counter: dispatch, queue, spill_cold,
                                                        spill_async, shed
    floodway_spills_total{endpoint, to}                 counter: cold, async
    floodway_sheds_total{endpoint, status}              counter: 429 (tenant rate), 503
    floodway_batch_rows{endpoint}                       histogram: rows per batch sent
    floodway_batch_seconds{endpoint}                    histogram: compute seconds per batch
    floodway_batch_padded_tokens{endpoint}              histogram: padded tokens per text batch
    floodway_connections_open                           gauge: open client connections
    floodway_connections_closed_total{reason}           counter: header_timeout,
                                                        body_timeout, unread_body, evicted,
                                                        over_cap (`floodway serve`)
    floodway_batch_service_seconds{endpoint}            histogram: router-side seconds per batch
    floodway_dropped_total{endpoint, lane, reason}      counter: queued rows dropped before a
                                                        model (deadline, cancelled;
                                                        cancelled_at_worker,
                                                        deadline_at_worker: skipped in the
                                                        worker's pipe)
    floodway_container_events_total{endpoint, lane, event}  counter: start, failed, stuck,
                                                        scale_down, rolled, recycled
    floodway_jobs{state}                                gauge: async jobs by state
    floodway_job_store_bytes                            gauge: bytes the local job store holds
                                                        (unfinished jobs' inputs, results)
    floodway_job_store_tenant_bytes{tenant}             gauge: the same per tenant
    floodway_job_store_quota_bytes{scope}               gauge: its quotas (total, tenant)
    floodway_job_store_rejections_total{reason}         counter: submits refused (total,
                                                        tenant: over a quota; disk_full),
                                                        results not stored (result)
    floodway_event_loop_lag_seconds                     histogram: how late the router's event
                                                        loop woke, sampled every 10 ms
                                                        (`floodway.http.looplag`)
    floodway_event_loop_lag_recent_seconds              gauge: the largest lag of the last 2 s
    floodway_gc_pause_seconds{generation}               histogram: the router's garbage
                                                        collections
    process_cpu_seconds_total, process_resident_memory_bytes, ...  the router process's
                                                        own (prometheus_client's
                                                        ProcessCollector; Linux only)
  streaming endpoints:
    floodway_time_to_first_chunk_seconds{endpoint}      histogram: request arrival -> an
                                                        input's first chunk
    floodway_inter_chunk_seconds{endpoint}              histogram: gaps between chunks
    floodway_generated_tokens_total{endpoint}           counter: a chunk's "tokens", else 1
    floodway_cancelled_sequences_total{endpoint}        counter: stopped unfinished (the
                                                        client left)
    floodway_active_sequences{endpoint}                 gauge  } summed over the endpoint's
    floodway_kv_cache_tokens{endpoint}                  gauge  } containers, from the
    floodway_kv_cache_capacity_tokens{endpoint}         gauge  } backend's readiness
  the response cache (`floodway.cache`), per endpoint that has one, read at scrape:
    floodway_cache_hits_total{endpoint}                 counter: items answered from it
    floodway_cache_misses_total{endpoint}               counter: items looked up, not found
    floodway_cache_bypassed_total{endpoint}             counter: items not looked up
                                                        (Cache-Control: no-cache)
    floodway_cache_shared_hits_total{endpoint}          counter: hits from the shared tier
    floodway_cache_bytes{endpoint}                      gauge: bytes held (keys, outputs and
                                                        each entry's bookkeeping)
    floodway_cache_entries{endpoint}                    gauge
    floodway_cache_evictions_total{endpoint, reason}    counter: size (the byte budget, LRU),
                                                        ttl (past its time to live)

Outcomes are the error types of the wire format (``ok``, ``invalid_request``, ``too_large``,
``not_found``, ``unavailable``, ``deadline_exceeded``, ``endpoint_error``). Each router has its
own registry, so several apps (and tests) in one process do not collide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest

from floodway.routers.lanes import split_unit

# Sub-10 ms to 10 s: shed answers are milliseconds, served ones up to a deadline.
LATENCY_BUCKETS_S = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000)
BATCH_TOKEN_BUCKETS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536, 262144)
# Gaps between chunks: a decode step is milliseconds to tens of them.
# Event-loop lag: a healthy loop wakes within a millisecond; a starved one seconds late.
LAG_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CHUNK_GAP_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
SEQUENCE_GAUGES = (("active", "floodway_active_sequences", "Sequences running"),
                   ("kv_cache_tokens", "floodway_kv_cache_tokens", "KV-cache tokens in use"),
                   ("kv_cache_capacity", "floodway_kv_cache_capacity_tokens",
                    "KV-cache capacity in tokens"))
CACHE_COUNTERS = (("hits", "Items answered from the response cache"),
                  ("misses", "Items looked up in the response cache and not found"),
                  ("bypassed", "Items not looked up (Cache-Control: no-cache)"),
                  ("shared_hits", "Items answered from the cache's shared tier"))
CACHE_GAUGES = (("bytes", "Bytes the response cache holds"),
                ("entries", "Entries the response cache holds"))
STATES = ("starting", "warming", "ready", "busy", "draining", "stopped", "failed")


class _PoolCollector:
    """Containers by state and their cold-start phases, from the backend's readiness detail."""

    def __init__(self, readiness: Callable[[], dict[str, Any]]):
        self.readiness = readiness

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        whole = self.readiness()
        detail, detail_queues = whole.get("endpoints", {}), whole.get("queues", {})
        states = GaugeMetricFamily("floodway_containers", "Containers by endpoint and state",
                                   labels=["endpoint", "lane", "state"])
        cold = GaugeMetricFamily("floodway_cold_start_seconds",
                                 "Cold-start seconds by phase, per live container",
                                 labels=["endpoint", "lane", "phase", "container"])
        for unit, containers in detail.items():
            for state in STATES:
                n = sum(1 for c in containers if c.get("state") == state)
                states.add_metric([*_labels(unit), state], n)
            for c in containers:
                if c.get("state") in ("stopped", "failed"):
                    continue
                for phase, secs in (c.get("cold_start_s") or {}).items():
                    cold.add_metric([*_labels(unit), phase, str(c.get("id"))], float(secs))
        depth = GaugeMetricFamily("floodway_queue_depth", "Requests waiting for a slot",
                                  labels=["endpoint", "lane"])
        rows = GaugeMetricFamily("floodway_queue_rows", "Rows waiting for a slot",
                                 labels=["endpoint", "lane"])
        dropped = CounterMetricFamily("floodway_dropped", "Queued rows dropped before a model",
                                      labels=["endpoint", "lane", "reason"])
        for unit, q in detail_queues.items():
            depth.add_metric(_labels(unit), q.get("queued", 0))
            rows.add_metric(_labels(unit), q.get("queued_rows", 0))
            for reason, n in q.get("dropped", {}).items():
                dropped.add_metric([*_labels(unit), reason], n)
        events = CounterMetricFamily("floodway_container_events",
                                     "Container lifecycle events since the router started",
                                     labels=["endpoint", "lane", "event"])
        for unit, counts in whole.get("container_events", {}).items():
            for event, n in counts.items():
                events.add_metric([*_labels(unit), event], n)
        yield from _sequence_gauges(whole.get("sequences", {}))
        yield states
        yield cold
        yield depth
        yield rows
        yield dropped
        yield events


def _labels(unit: str) -> list[str]:
    """``[endpoint, lane]`` of a unit key (``"embed:short"``; lane "" for a plain endpoint,
    `floodway.routers.lanes.split_unit`)."""
    endpoint, lane = split_unit(unit)
    return [endpoint, lane or ""]


def _sequence_gauges(sequences: dict[str, dict[str, int]]) -> Iterator[GaugeMetricFamily]:
    for key, name, doc in SEQUENCE_GAUGES:
        gauge = GaugeMetricFamily(name, f"{doc}, summed over the endpoint's containers",
                                  labels=["endpoint"])
        for endpoint, seq in sequences.items():
            gauge.add_metric([endpoint], seq.get(key, 0))
        yield gauge


class _CacheCollector:
    """The response cache's counters and gauges (`ResponseCache.stats`), at scrape."""

    def __init__(self, stats: Callable[[], dict[str, dict[str, int]]]):
        self.stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        stats = self.stats()
        counters = {key: CounterMetricFamily(f"floodway_cache_{key}", doc, labels=["endpoint"])
                    for key, doc in CACHE_COUNTERS}
        gauges = {key: GaugeMetricFamily(f"floodway_cache_{key}", doc, labels=["endpoint"])
                  for key, doc in CACHE_GAUGES}
        evictions = CounterMetricFamily("floodway_cache_evictions", "Cache entries dropped",
                                        labels=["endpoint", "reason"])
        for endpoint, s in stats.items():
            for key, counter in counters.items():
                counter.add_metric([endpoint], s.get(key, 0))
            for key, gauge in gauges.items():
                gauge.add_metric([endpoint], s.get(key, 0))
            evictions.add_metric([endpoint, "size"], s.get("evicted", 0))
            evictions.add_metric([endpoint, "ttl"], s.get("expired", 0))
        yield from counters.values()
        yield from gauges.values()
        yield evictions


class _JobsCollector:
    def __init__(self, counts: Callable[[], dict[str, int]]):
        self.counts = counts
        # A job queue that stores its jobs (the local one) also tells its bytes and the
        # submits it refused (`floodway.jobs.local.LocalJobs.storage`).
        self.storage = getattr(getattr(counts, "__self__", None), "storage", None)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        jobs = GaugeMetricFamily("floodway_jobs", "Async jobs by state", labels=["state"])
        for state, n in self.counts().items():
            jobs.add_metric([state], n)
        yield jobs
        if callable(self.storage):
            yield from _job_storage(self.storage())


def _job_storage(s: dict[str, Any]) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    yield GaugeMetricFamily("floodway_job_store_bytes", "Bytes the job store holds (inputs "
                            "of unfinished jobs, results of finished ones)", value=s["bytes"])
    tenants = GaugeMetricFamily("floodway_job_store_tenant_bytes",
                                "Bytes the job store holds per tenant", labels=["tenant"])
    for tenant, n in s["tenants"].items():
        tenants.add_metric([tenant], n)
    quota = GaugeMetricFamily("floodway_job_store_quota_bytes",
                              "The job store's quotas on stored bytes", labels=["scope"])
    for scope, n in s["quota_bytes"].items():
        quota.add_metric([scope], n)
    refused = CounterMetricFamily("floodway_job_store_rejections",
                                  "Job submits refused (over a quota, the disk full) "
                                  "and results not stored (over a quota)",
                                  labels=["reason"])
    for reason, n in s["rejections"].items():
        refused.add_metric([reason], n)
    yield from (tenants, quota, refused)


class _ConnectionsCollector:
    """The server's connections (`floodway.runtime.connections.ConnectionStats.snapshot`)."""

    def __init__(self, stats: Callable[[], dict[str, Any]]):
        self.stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        now = self.stats()
        gauge = GaugeMetricFamily("floodway_connections_open", "Open client connections")
        gauge.add_metric([], now.get("open", 0))
        closed = CounterMetricFamily("floodway_connections_closed",
                                     "Connections the router closed, by reason",
                                     labels=["reason"])
        for reason, count in now.get("closed", {}).items():
            closed.add_metric([reason], count)
        yield gauge
        yield closed


class Metrics:
    def __init__(self, readiness: Callable[[], dict[str, Any]],
                 job_counts: Callable[[], dict[str, int]] | None = None,
                 cache_stats: Callable[[], dict[str, dict[str, int]]] | None = None):
        self.registry = CollectorRegistry()
        self.requests = Counter("floodway_requests", "Requests by endpoint and outcome",
                                ["endpoint", "outcome"], registry=self.registry)
        self.latency = Histogram("floodway_request_seconds",
                                 "Router-side request latency by endpoint and outcome",
                                 ["endpoint", "outcome"], buckets=LATENCY_BUCKETS_S,
                                 registry=self.registry)
        self.decisions = Counter("floodway_decisions", "Dispatch decisions by action",
                                 ["endpoint", "action"], registry=self.registry)
        self.lane_decisions = Counter("floodway_lane_decisions", "Dispatch decisions by lane "
                                      "(Route.lanes; '' for an endpoint without lanes)",
                                      ["endpoint", "lane", "action"], registry=self.registry)
        self.spills = Counter("floodway_spills", "Requests spilled past the warm pool",
                              ["endpoint", "to"], registry=self.registry)
        self.sheds = Counter("floodway_sheds", "Requests rejected fast",
                             ["endpoint", "status"], registry=self.registry)
        self.batch_rows = Histogram("floodway_batch_rows", "Rows per batch sent to a container",
                                    ["endpoint"], buckets=BATCH_ROW_BUCKETS,
                                    registry=self.registry)
        self.batch_seconds = Histogram("floodway_batch_seconds",
                                       "Endpoint compute seconds per batch", ["endpoint"],
                                       buckets=LATENCY_BUCKETS_S, registry=self.registry)
        self.batch_tokens = Histogram("floodway_batch_padded_tokens",
                                      "Padded tokens per text batch (rows x longest input)",
                                      ["endpoint"], buckets=BATCH_TOKEN_BUCKETS,
                                      registry=self.registry)
        self.batch_service = Histogram("floodway_batch_service_seconds",
                                       "Router-side seconds per batch (sent to answered)",
                                       ["endpoint"], buckets=LATENCY_BUCKETS_S,
                                       registry=self.registry)
        self.first_chunk = Histogram("floodway_time_to_first_chunk_seconds",
                                     "Request arrival to an input's first streamed chunk",
                                     ["endpoint"], buckets=LATENCY_BUCKETS_S,
                                     registry=self.registry)
        self.inter_chunk = Histogram("floodway_inter_chunk_seconds",
                                     "Seconds between an input's streamed chunks", ["endpoint"],
                                     buckets=CHUNK_GAP_BUCKETS_S, registry=self.registry)
        self.tokens = Counter("floodway_generated_tokens", "Tokens streamed (a chunk's "
                              "'tokens', else 1 per chunk)", ["endpoint"],
                              registry=self.registry)
        self.cancelled_sequences = Counter("floodway_cancelled_sequences",
                                           "Streamed inputs stopped unfinished (client gone)",
                                           ["endpoint"], registry=self.registry)
        self.loop_lag = Histogram("floodway_event_loop_lag_seconds", "How late the router's event "
                                  "loop woke (seconds), sampled every 10 ms",
                                  buckets=LAG_BUCKETS_S, registry=self.registry)
        self.gc_pause = Histogram("floodway_gc_pause_seconds", "The router's garbage collections "
                                  "(seconds)", ["generation"], buckets=LAG_BUCKETS_S,
                                  registry=self.registry)
        self.lag_recent = Gauge("floodway_event_loop_lag_recent_seconds", "The largest event-loop "
                                "lag of the last seconds (seconds)", registry=self.registry)
        self.registry.register(_PoolCollector(readiness))
        # The router process's own CPU and memory (process_cpu_seconds_total, ...; Linux's
        # /proc, nothing elsewhere): `floodway bench` reads its CPU for the load term.
        ProcessCollector(registry=self.registry)
        if job_counts:
            self.registry.register(_JobsCollector(job_counts))
        if cache_stats:
            self.registry.register(_CacheCollector(cache_stats))

    def decided(self, endpoint: str, decision: Any, lane: str | None = None) -> None:
        action = str(decision.action)
        self.decisions.labels(endpoint, action).inc()
        self.lane_decisions.labels(endpoint, lane or "", action).inc()
        if action.startswith("spill_"):
            self.spills.labels(endpoint, action.removeprefix("spill_")).inc()
        elif action == "shed":
            self.sheds.labels(endpoint, str(decision.status or 503)).inc()

    def lag_source(self, recent_s: Callable[[], float]) -> None:
        """Read the recent event-loop lag at scrape (`floodway.http.looplag.LoopLag`)."""
        self.lag_recent.set_function(recent_s)

    def handed_off(self, endpoint: str) -> None:
        """A sync request near its deadline became an async job (a late spill)."""
        self.spills.labels(endpoint, "async_handoff").inc()

    def shed(self, endpoint: str, status: int) -> None:
        self.sheds.labels(endpoint, str(status)).inc()

    def watch_connections(self, stats: Callable[[], dict[str, Any]]) -> None:
        """Export the server's open connections and closes (`_ConnectionsCollector`)."""
        self.registry.register(_ConnectionsCollector(stats))

    def batch(self, endpoint: str, rows: int, compute_s: float, padded_tokens: int = 0,
              service_s: float = 0.0) -> None:
        """A completed batch: its rows, the worker's compute seconds, its padded tokens
        (rows x its longest input's estimated tokens; 0: not a text endpoint) and the
        router-side seconds (send to result, what the service-time fit reads; 0: unknown)."""
        self.batch_rows.labels(endpoint).observe(rows)
        self.batch_seconds.labels(endpoint).observe(compute_s)
        if padded_tokens:
            self.batch_tokens.labels(endpoint).observe(padded_tokens)
        if service_s:
            self.batch_service.labels(endpoint).observe(service_s)

    def chunk(self, endpoint: str, seconds: float, *, first: bool, tokens: int) -> None:
        """A streamed chunk: `seconds` since the request arrived (`first`) or since the
        input's previous chunk; `tokens` it carries."""
        (self.first_chunk if first else self.inter_chunk).labels(endpoint).observe(
            max(0.0, seconds))
        self.tokens.labels(endpoint).inc(tokens)

    def cancelled(self, endpoint: str, n: int = 1) -> None:
        self.cancelled_sequences.labels(endpoint).inc(n)

    def observe(self, endpoint: str, outcome: str, seconds: float) -> None:
        self.requests.labels(endpoint, outcome).inc()
        self.latency.labels(endpoint, outcome).observe(seconds)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
