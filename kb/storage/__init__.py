"""The storage layer below kb/ and api/: settings, the database backends (embedded SQLite, or
PostgreSQL for a fleet), their migrations, and the stores of diagnoses and tokens."""
