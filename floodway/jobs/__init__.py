"""The durable async job queue: the job record and its state machine (`job`), the SQLite
store (`store`; `leases`: claims, starts and attempts; `quota`: its bounded bytes; `schema`),
the runner that claims and runs jobs (`runner`; `feed`: their rows into the local pool), and
the local router's `Jobs` (`local`)."""
