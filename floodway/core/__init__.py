"""What the local runtime, the Modal router and the simulator share around the pure decisions
(`floodway.routers.decide.decide`, `floodway.warmers.desired`): the priors, the estimators
that replace them with measurements, the one snapshot builder, and `reconcile`, which turns a
warm target into container actions. And the contracts the HTTP layer is written against,
which the runtimes implement: `Backend` and `Pending` (`backend`), `Jobs` (`job_queue`),
`Clock` (`clock`), a stream's events (`stream_events`)."""
