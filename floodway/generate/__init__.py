"""Built-in text generation (`task="text-generation"`): a continuous-batching engine over
the build's graph with its key/value cache (`floodway.tasks.generation`).

    engine.py     the step loop on its own thread: admit, prefill, decode, deliver; the
                  asyncio side (`Engine.stream`)
    scheduler.py  admission between steps (sequences and cache reservations; pure)
    kv.py         each sequence's cache, packed into one padded batch per graph call
    sequence.py   one running sequence: sampler, text, stop strings, its chunks
    sampling.py   greedy, temperature and top-p, a numpy Generator per sequence
    detokenizer.py incremental decoding that never splits a character
    stops.py      stop strings, holding back text that could still become one
    requests.py   a prompt item -> a Request (validation, chat rendering, limits)
    chat.py       chat templates (Jinja2 sandbox)
    factory.py    the engine of a loaded build (`engine_for`)

Imports no torch: it runs in the container.
"""
