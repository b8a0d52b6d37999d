"""Body size limit, gzip bodies and gzip bombs (api/limits.py)."""

from __future__ import annotations

import gzip
import io
import json
import zlib

import pytest

from dsdoctor.api.errors import ApiError
from dsdoctor.api.limits import inflate, max_body_bytes
from tests.test_api_support import EVIDENCE, assert_problem, make_app

LIMIT = 256 * 1024


@pytest.fixture
def small_app(dsdoctor_home):
    app = make_app(dsdoctor_home, MAX_CONTENT_LENGTH=LIMIT)
    yield app
    app.extensions["dsdoctor"]["services"].close()


def test_limit_from_environment(monkeypatch) -> None:
    monkeypatch.delenv("DSDOCTOR_MAX_BODY_MB", raising=False)
    assert max_body_bytes() == 32 * 1024 * 1024
    monkeypatch.setenv("DSDOCTOR_MAX_BODY_MB", "0.5")
    assert max_body_bytes() == 512 * 1024
    for bad in ("lots", "0", "-3", "99999"):
        monkeypatch.setenv("DSDOCTOR_MAX_BODY_MB", bad)
        with pytest.raises(ValueError, match="DSDOCTOR_MAX_BODY_MB"):
            max_body_bytes()


def test_app_reads_the_limit(monkeypatch, dsdoctor_home) -> None:
    monkeypatch.setenv("DSDOCTOR_MAX_BODY_MB", "1")
    app = make_app(dsdoctor_home)
    assert app.config["MAX_CONTENT_LENGTH"] == 1024 * 1024
    app.extensions["dsdoctor"]["services"].close()


def test_oversized_body_is_refused_from_its_content_length(small_app) -> None:
    body = json.dumps({"description": "x" * (LIMIT + 10)})
    response = small_app.test_client().post("/v1/diagnoses", data=body, content_type="application/json")
    problem = assert_problem(response, 413)
    assert "DSDOCTOR_MAX_BODY_MB" in problem["detail"]


class _Counting(io.BytesIO):
    """A request stream that records how much was read from it."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.consumed = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        self.consumed += len(chunk)
        return chunk


def test_413_is_decided_before_the_body_is_read(small_app) -> None:
    stream = _Counting(b"x" * (4 * LIMIT))
    response = small_app.test_client().post("/v1/diagnoses", input_stream=stream, content_type="application/json",
                                            headers={"Content-Length": str(4 * LIMIT)})
    assert_problem(response, 413)
    assert stream.consumed == 0


def test_chunked_body_is_cut_at_the_limit(small_app) -> None:
    stream = _Counting(json.dumps({"description": "y" * (4 * LIMIT)}).encode())
    response = small_app.test_client().post(
        "/v1/diagnoses", input_stream=stream, content_type="application/json",
        environ_overrides={"wsgi.input_terminated": True}, headers={"Transfer-Encoding": "chunked"})
    assert_problem(response, 413)
    assert stream.consumed <= LIMIT + 64 * 1024


def test_gzip_body_is_accepted(small_app) -> None:
    body = gzip.compress(json.dumps(EVIDENCE).encode())
    response = small_app.test_client().post("/v1/diagnoses", data=body, content_type="application/json",
                                            headers={"Content-Encoding": "gzip"})
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["symptoms"]


def test_gzip_bomb_is_refused_not_inflated(small_app) -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < LIMIT
    response = small_app.test_client().post("/v1/diagnoses", data=bomb, content_type="application/json",
                                            headers={"Content-Encoding": "gzip"})
    problem = assert_problem(response, 413)
    assert "decompressed" in problem["detail"]


def test_inflate_stops_at_the_limit() -> None:
    produced = []

    class Sink(io.BytesIO):
        pass

    bomb = io.BytesIO(gzip.compress(b"a" * (10 * 1024 * 1024)))
    with pytest.raises(ApiError) as caught:
        produced.append(inflate(bomb, 1024 * 1024))
    assert caught.value.status == 413
    assert not produced


def test_inflate_concatenated_members_and_errors() -> None:
    two = gzip.compress(b"hello ") + gzip.compress(b"world")
    assert inflate(io.BytesIO(two), 1024).read() == b"hello world"
    with pytest.raises(ApiError) as truncated:
        inflate(io.BytesIO(gzip.compress(b"x" * 1000)[:-10]), 1 << 20)
    assert truncated.value.status == 400
    with pytest.raises(ApiError) as garbage:
        inflate(io.BytesIO(b"\x1f\x8bnot really"), 1 << 20)
    assert garbage.value.status == 400
    raw_deflate = zlib.compress(b"x")
    with pytest.raises(ApiError):
        inflate(io.BytesIO(raw_deflate), 1 << 20)


def test_gzipped_log_file_in_multipart_is_held_to_the_limit(small_app) -> None:
    client = small_app.test_client()
    ok = gzip.compress(b"[rank2]: step 7 loss is nan\n")
    response = client.post("/v1/diagnoses", content_type="multipart/form-data",
                           data={"logs": [(io.BytesIO(ok), "rank2.log.gz")]})
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["symptoms"][0]["ranks"] == [2]
    bomb = gzip.compress(b"\0" * (16 * 1024 * 1024))
    response = client.post("/v1/diagnoses", content_type="multipart/form-data",
                           data={"logs": [(io.BytesIO(bomb), "rank9.log.gz")]})
    assert_problem(response, 413)


def _exactly(size: int) -> bytes:
    base = len(json.dumps({"description": "loss is nan "}))
    body = json.dumps({"description": "loss is nan " + "x" * (size - base)}).encode()
    assert len(body) == size
    return body


@pytest.mark.parametrize("size", [LIMIT - 1, LIMIT])
def test_issue14_a_body_of_exactly_the_limit_is_accepted(small_app, size: int) -> None:
    client = small_app.test_client()
    body = _exactly(size)
    json_type = {"Content-Type": "application/json"}
    assert client.post("/v1/diagnoses", data=body, headers=json_type).status_code == 201
    chunked = client.post("/v1/diagnoses", input_stream=io.BytesIO(body), headers=json_type,
                          environ_overrides={"wsgi.input_terminated": True, "CONTENT_LENGTH": ""})
    assert chunked.status_code == 201, chunked.get_data(as_text=True)
    gzipped = client.post("/v1/diagnoses", data=gzip.compress(body), headers={**json_type, "Content-Encoding": "gzip"})
    assert gzipped.status_code == 201


def test_issue14_one_byte_over_the_limit_is_still_refused(small_app) -> None:
    client = small_app.test_client()
    body = _exactly(LIMIT + 1)
    json_type = {"Content-Type": "application/json"}
    assert_problem(client.post("/v1/diagnoses", data=body, headers=json_type), 413)
    assert_problem(client.post("/v1/diagnoses", input_stream=io.BytesIO(body), headers=json_type,
                               environ_overrides={"wsgi.input_terminated": True, "CONTENT_LENGTH": ""}), 413)
    assert_problem(client.post("/v1/diagnoses", data=gzip.compress(body),
                               headers={**json_type, "Content-Encoding": "gzip"}), 413)


def test_issue14_too_many_multipart_parts_says_so(dsdoctor_home) -> None:
    data = {"logs": [(io.BytesIO(b"x"), f"r{i}.log") for i in range(2100)]}  # ~300 KB, far below 32 MiB
    problem = assert_problem(make_app(dsdoctor_home).test_client().post("/v1/diagnoses", data=data,
                                                          content_type="multipart/form-data"), 413)
    assert "more than 2000 parts" in problem["detail"] and "MiB" not in problem["detail"]


@pytest.mark.parametrize(("content_type", "says"), [
    ("multipart/form-data; boundary=xyz", "no part starts with the boundary"),
    ("multipart/form-data", "needs a boundary"),
])
def test_issue14_a_bad_multipart_boundary_is_a_400(small_app, content_type: str, says: str) -> None:
    body = b'--abc\r\nContent-Disposition: form-data; name="description"\r\n\r\nloss is nan\r\n--abc--\r\n'
    problem = assert_problem(small_app.test_client().post("/v1/diagnoses", data=body,
                                                          headers={"Content-Type": content_type}), 400)
    assert says in problem["detail"]
