"""The timed fixture endpoint with a buffer: one container always, one more while active."""

import floodway as fw
from tests.e2e import timed_app

app = fw.App("buffered")
embed = app.endpoint(
    model=timed_app.app["embed"].model,
    build=timed_app.app["embed"].build,
    warm=fw.WarmPool(min_containers=1, buffer_containers=1, scaledown_window_s=2,
                     max_containers=3),
    route=fw.Route(max_inflight_per_container=2, timeout_s=5.0),
    batching=fw.Batching(max_batch_rows=4, wait_ms=30),
    cache=False,
)(timed_app.app["embed"].fn)
