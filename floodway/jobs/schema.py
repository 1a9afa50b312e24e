"""The job store's SQLite schema (`floodway.jobs.store`): one row per job; the indexes serve
claims (state, priority rank, age), lease expiry and purges. `SCHEMA_VERSION` is stored as
the file's ``user_version``: a store refuses a file written by a newer floodway, and brings
an older one up to date when it opens it (`migrate`), in one transaction.

Version 2 added, per job, ``started_s`` (when the work of the attempt under way reached a
container; NULL while claimed but not started), ``claims`` (times handed out), ``lost``
(attempts lost with their router: the lease expired after the work started) and
``completions`` (results delivered, the first one kept: more than one means the work ran
to completion twice); and the ``job_bytes`` table, the bytes stored per tenant (inputs,
results and errors as stored, UTF-8), kept by triggers on every insert, update and delete,
so that no write path can forget it and a quota check reads one row.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 2

# Bytes a row stores: what the quotas count (`floodway.jobs.store`).
_SIZE = ("length(CAST({r}.inputs AS BLOB)) + coalesce(length(CAST({r}.outputs AS BLOB)), 0)"
         " + coalesce(length(CAST({r}.error AS BLOB)), 0)")
_ADD = ("INSERT INTO job_bytes (tenant, bytes) VALUES (coalesce(NEW.tenant, ''), "
        f"{_SIZE.format(r='NEW')}) ON CONFLICT (tenant) DO UPDATE SET "
        "bytes = bytes + excluded.bytes;")
_SUB = (f"UPDATE job_bytes SET bytes = bytes - ({_SIZE.format(r='OLD')}) "
        "WHERE tenant = coalesce(OLD.tenant, '');")

TABLE = """
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
    body_sha256 TEXT NOT NULL,
    started_s REAL,
    claims INTEGER NOT NULL DEFAULT 0,
    lost INTEGER NOT NULL DEFAULT 0,
    completions INTEGER NOT NULL DEFAULT 0
)"""

# Columns added since version 1, for files that have its table: (name, declaration).
ADDED_COLUMNS = (("started_s", "REAL"), ("claims", "INTEGER NOT NULL DEFAULT 0"),
                 ("lost", "INTEGER NOT NULL DEFAULT 0"),
                 ("completions", "INTEGER NOT NULL DEFAULT 0"))

STATEMENTS = (
    "CREATE INDEX IF NOT EXISTS jobs_claim ON jobs (state, rank, created_s)",
    "CREATE INDEX IF NOT EXISTS jobs_lease ON jobs (state, lease_until_s)",
    "CREATE INDEX IF NOT EXISTS jobs_expiry ON jobs (expires_s) WHERE expires_s IS NOT NULL",
    "CREATE TABLE IF NOT EXISTS job_bytes (tenant TEXT PRIMARY KEY, bytes INTEGER NOT NULL)",
    f"CREATE TRIGGER IF NOT EXISTS job_bytes_insert AFTER INSERT ON jobs BEGIN {_ADD} END",
    "CREATE TRIGGER IF NOT EXISTS job_bytes_update AFTER UPDATE OF inputs, outputs, error, "
    f"tenant ON jobs BEGIN {_SUB} {_ADD} END",
    f"CREATE TRIGGER IF NOT EXISTS job_bytes_delete AFTER DELETE ON jobs BEGIN {_SUB} END",
)


def migrate(db: sqlite3.Connection, version: int) -> None:
    """Create the schema, or bring a file of schema `version` (its ``user_version``) up to
    `SCHEMA_VERSION`, inside the caller's transaction. From version 1: the added columns
    (``claims`` starts as ``attempts``: every attempt then was a claim), the byte counts of
    the rows already there, and the inputs of finished jobs dropped (they are kept only
    until a job finishes now)."""
    db.execute(TABLE)
    have = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    for name, decl in ADDED_COLUMNS:
        if name not in have:
            db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {decl}")
    for stmt in STATEMENTS:
        db.execute(stmt)
    if version < 2:
        db.execute("UPDATE jobs SET claims = attempts WHERE claims = 0")
        db.execute("DELETE FROM job_bytes")
        db.execute(f"INSERT INTO job_bytes (tenant, bytes) SELECT coalesce(tenant, ''), "
                   f"SUM({_SIZE.format(r='jobs')}) FROM jobs GROUP BY coalesce(tenant, '')")
        db.execute("UPDATE jobs SET inputs = '[]' WHERE state IN ('succeeded', 'failed') "
                   "AND inputs != '[]'")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
