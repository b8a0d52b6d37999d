"""The JSON encoder of stored documents now lives in the storage layer (kb/storage/jsontext.py)."""

from dsdoctor.kb.storage.jsontext import dumps, dumps_bytes

__all__ = ["dumps", "dumps_bytes"]
