"""Secrets are removed from evidence before it is stored or echoed (kb/redact.py, patterns in kb/redaction.yaml)."""

from __future__ import annotations

import time

import pytest

from dsdoctor.kb.redact import Redactions, is_secret_key, redact_text, redact_value

HF = "hf_" + "aB3" * 12
GHP = "ghp_" + "x1Y2" * 9
SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
AWS = "AKIAIOSFODNN7EXAMPLE"


@pytest.mark.parametrize(("text", "secret"), [
    (f"export HF_TOKEN={HF}", HF),
    (f"huggingface-cli login --token {HF}", HF),
    (f"Using hub token {HF} for upload", HF),
    (f"git remote add origin https://{GHP}@github.com/org/repo", GHP),
    (f"cloning with {GHP}", GHP),
    (f"SLACK_BOT={SLACK}", SLACK),
    (f"posting to slack with {SLACK} failed", SLACK),
    (f"aws_access_key_id = {AWS}", AWS),
    (f"found key {AWS} in env", AWS),
    ("db password=hunter2 host=x", "hunter2"),
    ('{"password": "correct horse"}', "correct"),
    ("WANDB_API_KEY: 0123456789abcdef0123", "0123456789abcdef0123"),
    ("--auth_token=s3cr3tvalue", "s3cr3tvalue"),
    ("MASTER_ADDR=redis://admin:pa55word@10.0.0.1:6379/0", "pa55word"),
    ("pip install git+https://user:tok3n@git.example.com/pkg.git", "tok3n"),
    ("Authorization: Bearer abcdefghijklmnop.qrstuvwx", "abcdefghijklmnop"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nxyz\n-----END RSA PRIVATE KEY-----", "MIIEow"),
])
def test_secret_is_removed(text: str, secret: str) -> None:
    found = Redactions()
    clean = redact_text(text, found)
    assert secret not in clean
    assert "[REDACTED:" in clean
    assert found.total >= 1


@pytest.mark.parametrize("text", [
    "[rank3]: step 100 loss=2.31 lr=1e-4 grad_norm=0.9",
    "max_tokens=4096 pad_token_id=0 num_tokens: 12",
    "tokenizer: loaded 32000 tokens",
    "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
    "ssh://git@github.com/org/repo.git and http://host:8080/path",
    "token=None password=null secret: none",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "训练在第 3 号卡上显存不足 password 未设置",
])
def test_ordinary_log_text_is_kept(text: str) -> None:
    assert redact_text(text) == text


def test_keeps_the_key_and_says_what_was_removed() -> None:
    found = Redactions()
    assert redact_text("HF_TOKEN=abc123xyz", found) == "HF_TOKEN=[REDACTED:secret_value]"
    assert redact_text(f"x {HF}", found) == "x [REDACTED:hf_token]"
    assert found.counts == {"secret_value": 1, "hf_token": 1}
    assert found.summary() == "2 secrets redacted before storing (hf_token: 1, secret_value: 1)"


def test_nested_values_and_secret_named_keys() -> None:
    config = {"train_batch_size": 8, "hf_token": "abc", "max_tokens": 5, "fp16": {"enabled": True},
              "wandb": {"api_key": 12345, "project": "x"}, "notes": [f"see {GHP}"], "password": ""}
    found = Redactions()
    clean = redact_value(config, found)
    assert clean["train_batch_size"] == 8 and clean["max_tokens"] == 5 and clean["fp16"] == {"enabled": True}
    assert clean["hf_token"] == "[REDACTED:secret_value]"
    assert clean["wandb"] == {"api_key": "[REDACTED:secret_value]", "project": "x"}
    assert clean["notes"] == ["see [REDACTED:github_token]"]
    assert config["hf_token"] == "abc"  # the input is not modified
    assert found.total == 3


@pytest.mark.parametrize(("key", "secret"), [("password", True), ("HF_TOKEN", True), ("aws_secret_access_key", True),
                                             ("api-key", True), ("max_tokens", False), ("tokenizer", False),
                                             ("train_batch_size", False), ("pad_token_id", False)])
def test_secret_key_names(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


HOSTILE = {
    "assignments": lambda n: "password=" * n,
    "scheme_run": lambda n: "a" * (8 * n) + "://",
    "url_colons": lambda n: "https://" + "u:" * (4 * n),
    "pem_unclosed": lambda n: "-----BEGIN PRIVATE KEY-----" + "x" * (8 * n),
    "bearers": lambda n: "Bearer " * n,
    "word_parts": lambda n: "a-" * (4 * n) + "password",
    "schemes": lambda n: "x://" * (2 * n),
    "long_password": lambda n: "ab://u:" + "p" * (8 * n),
    "many_secrets": lambda n: "token=a " * n,
    "pem_headers": lambda n: "-----BEGIN RSA PRIVATE KEY-----" * (n // 4),
    "begins": lambda n: "-----BEGIN " * n,
}


def _seconds(text: str) -> float:
    started = time.perf_counter()
    redact_text(text)
    return time.perf_counter() - started


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_linear_time_on_hostile_input(name: str) -> None:
    """Four times the input costs about four times the time (a quadratic pattern would cost 16x)."""
    make = HOSTILE[name]
    small = min(_seconds(make(10_000)) for _ in range(3))
    large = min(_seconds(make(40_000)) for _ in range(2))
    assert large < 8 * small + 0.05, (small, large)
    assert large < 3.0


def test_throughput_on_a_large_log() -> None:
    log = "[rank3]: 2024-05-01 12:00:00 INFO step 100 loss=2.31 token=abc123 https://u:p@h\n" * 40_000  # ~3 MB
    started = time.perf_counter()
    clean = redact_text(log)
    assert time.perf_counter() - started < 5.0
    assert "abc123" not in clean and "u:p@" not in clean


# ---------------------------------------------------------------- issue 14: the shapes as data, new shapes

from dsdoctor.kb.redact import SHAPES  # noqa: E402

_EXAMPLES = [(s.kind, kind, text) for s in SHAPES for kind in ("match", "no_match")
             for text in s.examples.get(kind, [])]


def test_every_pattern_carries_both_kinds_of_examples() -> None:
    for shape in SHAPES:
        assert shape.examples.get("match") and shape.examples.get("no_match"), shape.kind


@pytest.mark.parametrize(("kind", "expect", "text"), _EXAMPLES)
def test_pattern_examples(kind: str, expect: str, text: str) -> None:
    found = Redactions()
    redact_text(text, found)
    if expect == "match":
        assert found.counts[kind] >= 1, (kind, text, found.counts)
    else:
        assert found.counts[kind] == 0, (kind, text, found.counts)


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
NEW_SHAPES = {
    "pem_without_end": ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE\nbm9uZQAAAAAAAAAB\n",
                        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE"),
    "basic_auth": ("curl -H 'Authorization: Basic dXNlcjpodW50ZXIy' http://x", "dXNlcjpodW50ZXIy"),
    "aws_secret": (f"aws configure set aws_secret {AWS_SECRET}", AWS_SECRET),
    "bare_aws_secret": (f"keys: AKIAIOSFODNN7EXAMPLE {AWS_SECRET}\n", AWS_SECRET),
    "openai": ("OPENAI sk-AbCdEfGhIjKlMnOpQrStUvWxYz012345 used", "sk-AbCdEfGhIjKlMnOpQrStUvWxYz012345"),
    "openai_project": ("sk-proj-AbCdEfGhIjKlMnOpQrSt_uvwxyz0123", "AbCdEfGhIjKlMnOpQrSt_uvwxyz0123"),
    "gitlab": ("glpat-AbCdEfGhIjKlMnOpQrSt", "AbCdEfGhIjKlMnOpQrSt"),
    "slack_user": ("xoxp-1234567890-0987654321-abcdef", "1234567890-0987654321"),
    "google": ("AIzaSyA1234567890abcdefghijklmnopqrstuv", "SyA1234567890abcdef"),
    "percent_encoded": ("q=password%3Dhunter2&x=1", "hunter2"),
    "bearer_percent": ("/v1/x?auth=Bearer%20abcdefghijklmnop", "abcdefghijklmnop"),
}


@pytest.mark.parametrize("name", sorted(NEW_SHAPES))
def test_issue14_secret_shapes_are_removed(name: str) -> None:
    text, secret = NEW_SHAPES[name]
    clean = redact_text(text)
    assert secret not in clean and "[REDACTED:" in clean, clean


def test_redacting_twice_changes_nothing() -> None:
    once = redact_text(" ".join(text for text, _ in NEW_SHAPES.values()))
    assert redact_text(once) == once


def test_secrets_used_as_keys_are_removed() -> None:
    clean = redact_value({HF: 1, "observations": {f"x.a={GHP}": True}, "other": {HF: 2}})
    assert HF not in str(clean) and GHP not in str(clean)
    assert list(clean["observations"].values()) == [True]


def test_a_pem_block_without_end_keeps_the_lines_after_it() -> None:
    text = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabcd+/==\n[rank0] next line\n"
    assert redact_text(text) == "before\n[REDACTED:private_key]\n[rank0] next line\n"
