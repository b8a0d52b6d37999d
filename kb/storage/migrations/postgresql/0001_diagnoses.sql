-- Diagnoses with their redacted evidence (zlib JSON), observation history and job identity.
CREATE TABLE diagnoses (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    top_cause TEXT,
    top_probability DOUBLE PRECISION,
    verdict TEXT,
    summary TEXT NOT NULL DEFAULT '',
    lang TEXT NOT NULL DEFAULT 'en',
    top_n INTEGER NOT NULL DEFAULT 5,
    version INTEGER NOT NULL DEFAULT 1,
    evidence BYTEA NOT NULL,
    diagnosis TEXT NOT NULL,
    history TEXT NOT NULL DEFAULT '[]',
    job_id TEXT,
    cluster TEXT,
    job TEXT
);
CREATE INDEX diagnoses_created_at ON diagnoses (created_at);
CREATE INDEX diagnoses_job_id ON diagnoses (job_id);
CREATE INDEX diagnoses_cluster ON diagnoses (cluster);
