"""A small Modal app for the lanes tests: one GPU endpoint with two request lanes, each its
own Modal class with its own bounds (deployed against the fake control plane only)."""

import floodway as fw
from floodway.deploy import to_modal

endpoints = fw.App("floodway-lanes")


@endpoints.endpoint(
    model=fw.HFModel("sentence-transformers/all-MiniLM-L6-v2",
                     revision="c9745ed1d9f207416be6d2e6f8de32d1f16199bf"),
    build=fw.Build(onnx=True, max_batch_rows=8, max_seq_len=128),
    gpu="L4",
    warm=fw.WarmPool(min_containers=1, buffer_containers=1, scaledown_window_s=60,
                     max_containers=4, predictive=True),
    route=fw.Route(max_queue=64, timeout_s=10.0, lanes=(
        fw.Lane("short", max_tokens=16, min_containers=2, max_containers=2),
        fw.Lane("long", max_containers=3))),
    batching=fw.Batching(max_batch_rows=8, wait_ms=5),
)
def embed(model: fw.Loaded, texts: list[str]) -> list[list[float]]:
    """Never run: the fake control plane answers for it."""
    raise NotImplementedError


app = to_modal(endpoints)
