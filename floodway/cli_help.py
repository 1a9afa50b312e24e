"""The help texts of the `floodway` command (`floodway.cli`): each a summary (the command
list shows it), then one paragraph per line (typer shows a later paragraph's line breaks
as they are written)."""

from enum import Enum

CLI_HELP = ("Serverless GPU model endpoints that survive traffic spikes: batched endpoints, "
            "streaming ones (SSE or NDJSON; text generation with continuous batching), async "
            "jobs and OpenAI-compatible routes.")
BUILD_HELP = (
    "Build cold-start artifacts: fetch, snapshot, export, optimize, compile, verify, publish."
    "\n\n"
    "A task=\"text-generation\" model (a GPT-2- or Llama-style decoder) exports to one ONNX "
    "graph with its key/value cache, checked against PyTorch; the container runs it with "
    "continuous batching.")
SERVE_HELP = (
    "Serve endpoints locally: a router on HOST:PORT and worker-process containers "
    "(APP::ENDPOINT: that endpoint only; the others are not started and answer 404)."
    "\n\n"
    "POST /v1/ENDPOINT answers JSON; a streaming endpoint (a generator function) streams "
    "with the header Accept: text/event-stream (SSE) or application/x-ndjson. "
    "OpenAI-compatible routes beside them: /v1/models; /v1/embeddings for endpoints taking "
    "str items; /v1/completions and /v1/chat/completions for streaming endpoints taking "
    "fw.Prompt items (text generation).")
BENCH_HELP = (
    "Replay a per-request trace open loop against an endpoint: APP is served locally for the "
    "run, a URL (a deployed router) is used as it is."
    "\n\n"
    "Requests go out at the trace's times (divided by --time-scale) whatever the answers, "
    "each with X-Deadline-Ms and one item: a text about ContextTokens tokens long when the "
    "trace has that column, else a short text, or --input-json (a URL's /openapi.json is "
    "read first: no text goes to an endpoint that does not take text). Prints the outcomes (200 "
    "within the deadline, 200 late, 202, 429, 503, 504, other), the share answered honestly "
    "in time, the 200s' latency percentiles, the goodput and the router's event-loop lag; "
    "then follows every 202's job to its end (jobs succeeded, the backlog's drain); lists "
    "the answers other than 200/202 by status with the first one's error, and exits "
    "non-zero when every request was refused with a 4xx. Writes "
    "requests.csv, bench.png, batch_times.json (the "
    "batch times the router measured and their fit on padded tokens, rows and batches, for "
    "simulate) and run.json (what was replayed against what: simulate --bench-run) to --out.")
SIMULATE_HELP = (
    "Simulate an endpoint's warm pool and router over a trace, with its own config, the real "
    "decide() and warm-pool policy: cold starts, latency, shed/spill, container-minutes, cost."
    "\n\n"
    "A streaming endpoint on a per-request trace with token columns (ContextTokens, "
    "GeneratedTokens), or any endpoint with --generation, runs the generation simulator "
    "(decide_stream, iteration-level containers at the priors' speed): time to first token, "
    "tokens/s, first tokens within the deadline."
    "\n\n"
    "It prints the service model it runs: --batch-times, --bench-run or --service-ms when "
    "given; else the batch times of the last `floodway bench` run of the same app and "
    "endpoint in ./bench-out (bench's default --out), when there is one; else the prior "
    "every router starts from, 20 ms + 5 ms per row."
    "\n\n"
    "--batch-times takes the service model a `floodway bench` run measured (its "
    "batch_times.json): decide() plans with its fit, and each batch runs the time measured for "
    "its size where there is one. When that fit has a per-token term, the endpoint takes text "
    "and the trace has a ContextTokens column, requests cost their tokens (padded per batch), "
    "as the runtime counts them."
    "\n\n"
    "--bench-run DIR simulates what a `floodway bench` run replayed (its run.json and "
    "batch_times.json in DIR): the same trace rows at the same time scale, each request "
    "costing the tokens the router estimated for the text it was sent, the run's deadline "
    "as the route's timeout, its containers (--containers, else the warm pool capped at the "
    "most the run had live) and the service model it measured. Requests the router would "
    "hand to the async queue near their deadline count as async jobs, as the runtime's "
    "deadline hand-off answers them 202.")
# Option help texts of `simulate` (kept here: cli.py is at its size limit).
TRACE_OPT = ("per-request CSV (a timestamp column) or per-minute counts CSV (minute_1..N); "
             "not with --bench-run")
BATCH_TIMES_OPT = ("a floodway bench run's batch_times.json: its measured service model (not "
                   "--service-ms)")
GENERATION_OPT = ("simulate token generation (a streaming endpoint's sequences) even if the "
                  "endpoint does not stream; needs ContextTokens and GeneratedTokens columns")
BENCH_RUN_OPT = ("a floodway bench --out folder: simulate the requests that run replayed, "
                 "as it served them, with the batch times it measured (not with --trace or "
                 "--batch-times)")
# `floodway serve --log-level`: floodway's loggers and uvicorn's.
LogLevel = Enum("LogLevel", {name: name for name in ("debug", "info", "warning", "error")},
                type=str)
LOG_LEVEL_OPT = ("the server log's level: floodway's and uvicorn's loggers (a traceback of "
                 "the endpoint's own code failing is logged at error)")
# `floodway serve`'s job queue options (the quotas: floodway.jobs.quota).
JOBS_HELP = {
    "db": "SQLite file of async jobs (default: $FLOODWAY_JOBS_DB, else "
          "<store>/.jobs/<app>/jobs.sqlite3)",
    "ttl": "seconds a finished job's result is kept",
    "max": "MiB the job store holds at most (inputs of unfinished jobs, results of finished "
           "ones); a submit past it is answered 503 with Retry-After",
    "tenant": "MiB of jobs one tenant may hold in the job store (a submit past it: 503)",
}

__all__ = ["BATCH_TIMES_OPT", "BENCH_HELP", "BENCH_RUN_OPT", "BUILD_HELP", "CLI_HELP",
           "GENERATION_OPT", "JOBS_HELP", "LOG_LEVEL_OPT", "LogLevel", "SERVE_HELP",
           "SIMULATE_HELP", "TRACE_OPT"]
