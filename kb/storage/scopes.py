"""The scopes an API bearer token can carry (a module of its own: the CLI's help reads them without
importing the token store)."""

SCOPES = ("diagnose", "incidents:read", "incidents:write", "admin")
