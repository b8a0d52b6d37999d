"""The settings now live below kb/ and api/ (kb/storage/settings.py); this name stays for the API's callers."""

from dsdoctor.kb.storage.settings import ENVIRONMENT, cli_cache_dir, database_url, home, kb_overlay_paths

__all__ = ["ENVIRONMENT", "cli_cache_dir", "database_url", "home", "kb_overlay_paths"]
