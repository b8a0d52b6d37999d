-- Incidents with versions, searchable straight from this table (no index queue, no index lock): every
-- write stores the jieba-segmented terms of the record as tsvectors in the same row and transaction.
-- text_tsv: every part of the record, positions weighted A title, B phenomenon and root cause, D the rest;
-- title_tsv: the title alone; identifiers: the record's identifiers (NCCL_SOCKET_IFNAME, error enums),
-- lower-cased, for substring search through pg_trgm. Tags and symptoms are arrays of the row.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE TABLE incidents (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    phenomenon TEXT NOT NULL,
    scope TEXT NOT NULL DEFAULT '',
    root_cause TEXT NOT NULL,
    domain TEXT NOT NULL,
    root_cause_detail TEXT NOT NULL DEFAULT '',
    fix TEXT NOT NULL DEFAULT '',
    regression TEXT NOT NULL DEFAULT '',
    prevention TEXT NOT NULL DEFAULT '',
    severity TEXT NOT NULL CHECK (severity IN ('critical', 'high', 'medium', 'low')),
    status TEXT NOT NULL CHECK (status IN ('open', 'resolved')),
    occurred_at TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    author TEXT NOT NULL DEFAULT '',
    source_url TEXT NOT NULL DEFAULT '',
    job TEXT NOT NULL DEFAULT '{}',
    diagnosis_id TEXT,
    evidence_summary TEXT NOT NULL DEFAULT '',
    tags TEXT[] NOT NULL DEFAULT '{}',
    symptoms TEXT[] NOT NULL DEFAULT '{}',
    text_tsv TSVECTOR NOT NULL,
    title_tsv TSVECTOR NOT NULL,
    identifiers TEXT NOT NULL DEFAULT ''
);
CREATE INDEX incidents_by_time ON incidents (occurred_at DESC, id);
CREATE INDEX incidents_by_cause ON incidents (root_cause, status);
CREATE INDEX incidents_by_domain ON incidents (domain);
CREATE INDEX incidents_text_tsv ON incidents USING GIN (text_tsv);
CREATE INDEX incidents_title_tsv ON incidents USING GIN (title_tsv);
CREATE INDEX incidents_identifiers ON incidents USING GIN (identifiers gin_trgm_ops);
CREATE INDEX incidents_tags ON incidents USING GIN (tags);
CREATE INDEX incidents_symptoms ON incidents USING GIN (symptoms);
-- seeded / public-file digest, as in the embedded store's store_meta
CREATE TABLE incident_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
