"""The durable async job queue: the job record and its state machine (`job`), the SQLite
store (`store`), the runner that claims and runs jobs (`runner`), and the local router's
`Jobs` (`local`)."""
