"""The job store's SQLite schema (`floodway.jobs.store`): one row per job; the indexes serve
claims (state, priority rank, age), lease expiry and purges. `SCHEMA_VERSION` is stored as
the file's ``user_version``: a store refuses a file written by a newer floodway."""

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    endpoint TEXT NOT NULL,
    tenant TEXT,
    priority TEXT NOT NULL,
    rank INTEGER NOT NULL,
    state TEXT NOT NULL,
    inputs TEXT NOT NULL,
    outputs TEXT,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    lease_until_s REAL,
    not_before_s REAL NOT NULL,
    created_s REAL NOT NULL,
    updated_s REAL NOT NULL,
    finished_s REAL,
    expires_s REAL,
    idem_scope TEXT UNIQUE,
    body_sha256 TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_claim ON jobs (state, rank, created_s);
CREATE INDEX IF NOT EXISTS jobs_lease ON jobs (state, lease_until_s);
CREATE INDEX IF NOT EXISTS jobs_expiry ON jobs (expires_s) WHERE expires_s IS NOT NULL;
"""
