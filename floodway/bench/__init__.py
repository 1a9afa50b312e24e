"""`floodway bench`: open-loop replay of a per-request trace against an endpoint (local or
deployed), with outcome counts, latency percentiles, goodput, a plot and the batch times
it measured. One concept per module: plan (what is sent), replay (the open-loop sender),
outcomes (counts, percentiles, goodput), batches (batch times from /metrics), report
(table, CSV, JSON), plot (PNG), server (the local `floodway serve`), command (the CLI)."""
