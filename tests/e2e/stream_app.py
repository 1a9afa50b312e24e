"""A fixture app for the streaming end-to-end test: endpoints without a model source (no
build beyond a manifest), whose functions are generators scripted by their input.

    words   (async)  yields each word of the text, with a short await between them;
                     "forever" yields "tick " until cancelled
    counts  (sync)   yields {"text": "<i> ", "tokens": 1} for i in range(n)
    endless (async)  yields "tick " for ever, under Generation(max_stream_s=1): its streams
                     (and jobs) end at 1 s, far before the route's 10 s timeout
"""

import asyncio

import floodway as fw

app = fw.App("streams")
GAP_S = 0.05


@app.endpoint(route=fw.Route(timeout_s=10.0), warm=fw.WarmPool(min_containers=1),
              generation=fw.Generation(max_sequences=4))
async def words(model, text: str):
    if text == "forever":
        while True:
            await asyncio.sleep(GAP_S)
            yield "tick "
    for w in text.split():
        await asyncio.sleep(GAP_S)
        yield w + " "


@app.endpoint(route=fw.Route(timeout_s=10.0), warm=fw.WarmPool(min_containers=1))
def counts(model, n: int):
    for i in range(n):
        yield {"text": f"{i} ", "tokens": 1}


@app.endpoint(route=fw.Route(timeout_s=10.0), warm=fw.WarmPool(min_containers=1),
              generation=fw.Generation(max_sequences=2, max_stream_s=1))
async def endless(model, text: str):
    while True:
        await asyncio.sleep(GAP_S)
        yield "tick "
