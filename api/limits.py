"""Request body limits: a size cap enforced while reading, and gzip bodies inflated in bounded steps.

Werkzeug refuses a body whose Content-Length exceeds ``MAX_CONTENT_LENGTH`` before reading it.
A chunked body (no Content-Length) is read here into a spooled file, held to the limit: werkzeug's
own guard refuses a read *at* the limit, so a body of exactly the limit got a 413 (it needs one
more read to see the end). A ``Content-Encoding: gzip`` body is inflated here chunk by chunk,
never producing more than the same limit (plus one chunk): a gzip bomb is refused with 413 after
at most ``limit`` bytes of output, not inflated. Either way the view then reads a body of known
length, so exactly ``limit`` bytes are accepted.
"""

from __future__ import annotations

import os
import tempfile
import zlib
from typing import IO

from flask import Request, current_app, request

from dsdoctor.api.errors import ApiError

DEFAULT_MAX_BODY_MB = 32
CHUNK = 64 * 1024
SPOOL_IN_MEMORY = 4 * 1024 * 1024  # inflated bodies above this go to a temporary file


def max_body_bytes(environ: dict[str, str] | None = None) -> int:
    """The body limit in bytes from ``DSDOCTOR_MAX_BODY_MB`` (default 32 MiB; fractions allowed)."""
    raw = (environ if environ is not None else os.environ).get("DSDOCTOR_MAX_BODY_MB", "").strip()
    if not raw:
        return DEFAULT_MAX_BODY_MB * 1024 * 1024
    try:
        mb = float(raw)
    except ValueError:
        raise ValueError(f"DSDOCTOR_MAX_BODY_MB must be a number of MiB such as 32, got {raw!r}") from None
    if not 0 < mb <= 4096:
        raise ValueError(f"DSDOCTOR_MAX_BODY_MB must be between 0 and 4096 MiB, got {raw!r}")
    return int(mb * 1024 * 1024)


def read_body() -> bytes:
    """The whole request body, read in chunks: a streamed (chunked) body past the limit raises 413
    instead of being cut silently at the limit (as a single ``read()`` would be)."""
    stream = request.stream
    chunks = []
    while chunk := stream.read(CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(limit: int, what: str = "request body") -> ApiError:
    """The 413 problem for a body over the limit."""
    return ApiError(413, f"{what} is larger than the limit of {limit / (1024 * 1024):g} MiB (DSDOCTOR_MAX_BODY_MB); "
                    "send only the failing ranks' logs, or compress them", title="Content Too Large")


def inflate(source: IO[bytes], limit: int, what: str = "request body") -> IO[bytes]:
    """Gunzip ``source`` into a spooled file of at most ``limit`` bytes (413 beyond, 400 if not gzip).

    Concatenated gzip members are inflated one after another, as ``gzip -d`` does.
    """
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 - handed to the caller
    written = 0
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = b""
    started = False
    try:
        while True:
            if not pending:
                pending = source.read(CHUNK)
                if not pending:
                    break
            started = True
            piece = inflater.decompress(pending, limit - written + 1)
            pending = inflater.unconsumed_tail
            written += len(piece)
            if written > limit:
                raise too_large(limit, f"the {what} once decompressed")
            out.write(piece)
            if inflater.eof:
                pending = inflater.unused_data + pending
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                started = False
        if started and not inflater.eof:
            raise ApiError(400, f"the {what} is truncated gzip data (Content-Encoding: gzip)")
    except zlib.error as exc:
        out.close()
        raise ApiError(400, f"the {what} is not valid gzip data: {exc}") from None
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out


def _spool(source: IO[bytes], limit: int) -> IO[bytes]:
    """A streamed body copied to a spooled file; 413 once it passes ``limit`` (exactly ``limit`` is fine)."""
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 - handed to the caller
    written = 0
    try:
        while chunk := source.read(min(CHUNK, limit - written + 1)):
            written += len(chunk)
            if written > limit:
                raise too_large(limit)
            out.write(chunk)
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out


def decode_content_encoding() -> None:
    """before_request hook: a streamed body becomes one of known length (413 past the limit), a gzip body
    its inflated bytes (other encodings are refused)."""
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in ("", "identity", "gzip", "x-gzip"):
        raise ApiError(415, f"Content-Encoding {encoding!r} is not supported; send the body plain or gzip-compressed "
                       "(Content-Encoding: gzip)", title="Unsupported Media Type")
    limit = int(current_app.config["MAX_CONTENT_LENGTH"])
    environ = request.environ
    streamed = "wsgi.input_terminated" in environ and not environ.get("CONTENT_LENGTH")
    if streamed and request.method in ("POST", "PUT", "PATCH"):
        # a gzip body may be a little larger than what it inflates to
        spooled = _spool(environ["wsgi.input"], limit + (limit // 100 + 1024 if encoding else 0))
        size = spooled.seek(0, os.SEEK_END)
        spooled.seek(0)
        _replace_body(request, spooled, size)
    if encoding in ("", "identity"):
        return
    inflated = inflate(request.stream, limit)
    size = inflated.seek(0, os.SEEK_END)
    inflated.seek(0)
    _replace_body(request, inflated, size)


def _replace_body(req: Request, body: IO[bytes], size: int) -> None:
    environ = req.environ
    environ["wsgi.input"] = body
    environ["CONTENT_LENGTH"] = str(size)
    environ.pop("HTTP_CONTENT_ENCODING", None)
    environ.pop("HTTP_TRANSFER_ENCODING", None)
    environ.pop("wsgi.input_terminated", None)  # a known length now; werkzeug's max guard would refuse exactly the limit
    for cached in ("stream", "_cached_data"):  # read from the new body from now on
        req.__dict__.pop(cached, None)
    closers = req.__dict__.setdefault("_dsdoctor_closers", [])
    closers.append(body.close)


def close_request_files(_exc: BaseException | None = None) -> None:
    """teardown_request hook: close temporary files made for this request."""
    for close in getattr(request, "_dsdoctor_closers", ()):
        close()
