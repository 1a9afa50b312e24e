"""Priors: what floodway assumes about an endpoint before anything was measured.

Every estimate that `decide()` and the warm-pool policies are fed starts from one of these,
and measurements replace them as soon as there are any (`floodway.core.estimators`). They are
defined here once, for the local runtime, the Modal router and warmers, and the simulator.

- `COLD_START_PRIOR_S` (30 s): seconds from asking for a container to its first ready
  answer. Between a memory-snapshot restore and a full GPU cold start: Modal reports that
  snapshots start 3-10x faster (https://modal.com/docs/guide/memory-snapshots), and a GPU
  model server takes about a minute to download, load and initialize from scratch versus about
  10 s restored (NVIDIA Dynamo's snapshot docs). Too high a guess only delays a spill to a
  cold container that the pool would start anyway; too low would make requests wait past their
  deadlines for capacity that is not there. A local container measures its own start within
  seconds of the router starting, so the prior matters only until then. It is used only where
  nothing better is known: a build's cold-start probe, or starts that earlier `floodway serve`
  runs measured of the same build, replace it from the router's first request on
  (`floodway.core.estimators.ColdStartEstimator.known`).
- `PROBE_START_FACTOR` (1.5) and `PROBE_START_MARGIN_S` (0.25 s): a container's cold start
  as a build's probe implies it, `PROBE_START_FACTOR` x the probe + `PROBE_START_MARGIN_S`
  (`floodway.core.estimators.build_start_s`). The probe (`floodway.build.probe`) times a
  fresh process from its spawn to the build loaded in it, as it was published: the
  interpreter's start, the imports and the load. A container pays that and imports the
  app's module and runs its warm-up batches too (benchmarks/cold_start.py: 0.38-0.44 s in
  all for the ONNX examples), on a machine that may be busier than the build's: half as long
  again, and a quarter second. An estimate too low makes a request spilled to a cold
  container wait for it until the deadline hands it to a job (the 202 it would have had at
  once); the first start the router times replaces it. On Modal the router adds the
  scheduling and snapshot restore no container can time itself
  (`floodway.modal.stats.BOOT_S`, 5 s) as a floor.
- `SERVICE_PRIOR`: seconds one batch of `rows` rows holds a container, 20 ms + 5 ms per row:
  a conservative CPU-class guess for a small encoder (benchmarks/cold_start.py measures
  all-MiniLM-L6-v2 at about 2-3 ms per row on two cores), replaced by the least-squares fit of
  measured batches (`floodway.routers.decide.ServiceTime.fit`).
- `SERVICE_PRIOR_S`: the same prior for one request of one row, as the warm-pool policies'
  Little's-law sizing reads it (`floodway.warmers.target.Measured.service_s`).
- `ROW_TOKENS_PRIOR` (34): tokens per text row before any batch of an endpoint taking text
  was measured: the length of the texts the 2-3 ms per row above was measured with
  (benchmarks/burst.py's texts, about 34 tokens each).
- `TEXT_SERVICE_PRIOR`: `SERVICE_PRIOR` for an endpoint taking text, on padded tokens:
  20 ms a batch + 1 ms a row (tokenizing, pooling, encoding the output) + the rest of the
  5 ms per row spread over `ROW_TOKENS_PRIOR` tokens (an encoder's work grows with the
  tokens it sees), so that a row of that length costs exactly what `SERVICE_PRIOR` says and
  a row of 256 tokens about 6x more; replaced by the fit of measured batches
  (`floodway.routers.service.ServiceTime.fit_padded`).

Generation (streaming endpoints, `floodway.core.generation`):

- `PREFILL_PRIOR`: seconds to prefill one prompt of `rows` tokens, 10 ms + 1 ms per token
  (1,000 prompt tokens/s): a conservative guess for a small decoder on CPU cores. A GPU
  prefills thousands of tokens per second (vLLM, Kwon et al., SOSP 2023: the prompt phase
  is compute-bound and parallel over its tokens), so measured prompts only ever lower it.
- `DECODE_STEP_PRIOR`: seconds of one decode step (one token for every active sequence) with
  `rows` active sequences, 20 ms + 2 ms per sequence: decoding is memory-bound, so a step's
  fixed cost (reading the weights once) dominates and each sequence adds its KV-cache reads
  (Orca, Yu et al., OSDI 2022; vLLM). At 8 sequences that is 222 tokens/s (36 ms a step);
  a GPU is faster, and the measured fit replaces it after the first steps.
- `GENERATED_TOKENS_PRIOR` (128): generated tokens per request before any request finished,
  half of the default `max_new_tokens` cap (256): what a request costs the warm-pool sizing.
- `PROMPT_TOKENS_PRIOR` (256): prompt tokens per request before any was measured.
"""

from __future__ import annotations

from floodway.routers.decide import ServiceTime

COLD_START_PRIOR_S = 30.0
PROBE_START_FACTOR = 1.5
PROBE_START_MARGIN_S = 0.25
SERVICE_PRIOR = ServiceTime(per_row_s=0.005, per_batch_s=0.02)
SERVICE_PRIOR_S = SERVICE_PRIOR.seconds(1)
ROW_TOKENS_PRIOR = 34
TEXT_SERVICE_PRIOR = ServiceTime(per_row_s=0.001, per_batch_s=0.02,
                                 per_token_s=(0.005 - 0.001) / ROW_TOKENS_PRIOR)
PREFILL_PRIOR = ServiceTime(per_row_s=0.001, per_batch_s=0.01)
DECODE_STEP_PRIOR = ServiceTime(per_row_s=0.002, per_batch_s=0.02)
GENERATED_TOKENS_PRIOR = 128
PROMPT_TOKENS_PRIOR = 256

__all__ = ["COLD_START_PRIOR_S", "DECODE_STEP_PRIOR", "GENERATED_TOKENS_PRIOR", "PREFILL_PRIOR",
           "PROBE_START_FACTOR", "PROBE_START_MARGIN_S", "PROMPT_TOKENS_PRIOR",
           "ROW_TOKENS_PRIOR", "SERVICE_PRIOR", "SERVICE_PRIOR_S", "TEXT_SERVICE_PRIOR"]
