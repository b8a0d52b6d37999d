-- API bearer tokens, stored as SHA-256 hashes only.
CREATE TABLE tokens (
    name TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    prefix TEXT NOT NULL,
    scopes TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT
);
