"""A small Modal app for the burst test: one GPU endpoint with at most two containers, small
batches and a short deadline (deployed against the fake control plane only)."""

import floodway as fw
from floodway.deploy import to_modal

endpoints = fw.App("floodway-burst")


@endpoints.endpoint(
    model=fw.HFModel("sentence-transformers/all-MiniLM-L6-v2",
                     revision="c9745ed1d9f207416be6d2e6f8de32d1f16199bf"),
    build=fw.Build(onnx=True, max_batch_rows=4, max_seq_len=32),
    gpu="L4",
    warm=fw.WarmPool(min_containers=1, buffer_containers=0, scaledown_window_s=60,
                     max_containers=2),
    route=fw.Route(max_inflight_per_container=8, max_queue=64, timeout_s=0.8,
                   spill=("cold", "async")),
    batching=fw.Batching(max_batch_rows=4, wait_ms=5),
)
def burst(model: fw.Loaded, texts: list[str]) -> list[list[float]]:
    """Never run: the fake control plane answers for it."""
    raise NotImplementedError


app = to_modal(endpoints)
