-- Signed-in browser sessions (only the id's SHA-256) and the one session signing key of the fleet,
-- so a browser signed in through one replica is signed in on all, and signing out ends it on all.
CREATE TABLE web_sessions (
    id_sha256 TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX web_sessions_created_at ON web_sessions (created_at);
CREATE TABLE web_secret (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    key_hex TEXT NOT NULL
);
