"""One analyzer for Chinese and English text in the same field.

Latin-script words are lower-cased and stemmed (Porter: "checkpoints" -> "checkpoint");
identifiers such as ``NCCL_SOCKET_IFNAME`` or ``config.batch_size_mismatch`` are kept whole
and also split into their parts. Runs of Chinese characters are segmented by jieba in its
"search" style (each word plus the dictionary words inside it, so "显存碎片" matches
"显存碎片化"). Index and query text go through the same :func:`terms` function.

jieba costs about a second to load, so it is imported lazily, only when a text holds Chinese
characters: opening the index or searching English never imports it. :func:`warm_up` loads it
ahead of time (once per server worker). Its dictionary cache goes to ``<home>/cache``, never
/tmp. :class:`BilingualAnalyzer` is pickled into the Whoosh index, so it keeps no jieba state.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from whoosh.analysis import Composable, Token
from whoosh.lang.porter import stem as _porter_stem

from dsdoctor.kb.storage import settings

#: Han ideographs (CJK unified + extension A + compatibility).
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN_RE = re.compile(
    rf"(?P<han>[{_HAN}]+)"  # a run of Chinese characters: segmented by jieba
    rf"|(?P<word>[^\W_{_HAN}]+)"  # letters and digits; _ . - and punctuation separate words
)
_HAN_RE = re.compile(f"[{_HAN}]")
#: ``SECTION + "3"`` starts a part of an index value whose terms weigh 3 (see :func:`sections`)
SECTION = "\x1e"
_SECTION_RE = re.compile(SECTION + r"(\d)")
#: positions skipped between sections, so a phrase never spans two of them
SECTION_GAP = 100
_ASCII_ALPHA_RE = re.compile(r"^[a-z]+$")
MAX_TERM_CHARS = 64

ENGLISH_STOP_WORDS = frozenset([
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "if", "in", "into", "is",
    "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "were", "will", "with",
])
CHINESE_STOP_WORDS = frozenset([
    "的", "了", "和", "与", "及", "或", "是", "在", "就", "也", "都", "而", "着", "把", "被", "之", "这", "那",
    "吗", "呢", "吧", "啊",
])
STOP_WORDS = ENGLISH_STOP_WORDS | CHINESE_STOP_WORDS

_jieba_lock = threading.Lock()
_jieba_tokenizer: Any = None


def configure(cache_dir: Path) -> None:
    """Put jieba's dictionary cache in ``cache_dir`` (call before the first Chinese text)."""
    settings.set_jieba_cache_dir(cache_dir)


def _jieba() -> Any:
    """The initialised jieba tokenizer, loaded on first use (≈1 s once, cached on disk)."""
    global _jieba_tokenizer
    if _jieba_tokenizer is not None:
        return _jieba_tokenizer
    with _jieba_lock:
        if _jieba_tokenizer is None:
            import logging

            import jieba

            jieba.setLogLevel(logging.WARNING)
            cache_dir = settings.jieba_cache_dir()
            cache_dir.mkdir(parents=True, exist_ok=True)
            tokenizer = jieba.Tokenizer()
            tokenizer.tmp_dir = str(cache_dir)
            tokenizer.cache_file = "jieba.cache"
            tokenizer.initialize()
            _jieba_tokenizer = tokenizer
    return _jieba_tokenizer


def warm_up(cache_dir: Path | None = None) -> None:
    """Load jieba now (call once per server worker at start) so no request pays for it."""
    if cache_dir is not None:
        configure(cache_dir)
    list(terms("预热 warm up"))


def jieba_loaded() -> bool:
    """True once this process has loaded jieba's dictionary."""
    return _jieba_tokenizer is not None


def has_chinese(text: str) -> bool:
    """True when ``text`` holds at least one Han character."""
    return _HAN_RE.search(text) is not None


@functools.lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """Porter stem of a lower-case ASCII word; other words unchanged."""
    return _porter_stem(word) if _ASCII_ALPHA_RE.match(word) else word


@functools.lru_cache(maxsize=20_000)
def _han_words(run: str) -> tuple[tuple[str, int, int, bool], ...]:
    """Segment a run of Han characters: (word, start, end, is_main_word) in text order.

    Each dictionary word comes first, then the 2- and 3-character dictionary words inside it
    (jieba's "search" mode). HMM guessing stays off so a term segments the same way in a short
    query as in a long document. Cached: highlighting re-reads the same texts.
    """
    if len(run) == 1:
        return ((run, 0, 1, True),)
    tokenizer = _jieba()
    freq = tokenizer.FREQ
    out = []
    start = 0
    for word in tokenizer.cut(run, HMM=False):
        width = len(word)
        out.append((word, start, start + width, True))
        for size in (2, 3):
            if width > size:
                for i in range(width - size + 1):
                    gram = word[i : i + size]
                    if freq.get(gram):
                        out.append((gram, start + i, start + i + size, False))
        start += width
    return tuple(out)


def terms(text: str, keep_stops: bool = False, query: bool = False) -> Iterator[tuple[str, int, int, int]]:
    """Index terms of ``text``: (term, position, start_char, end_char).

    Identifiers split at ``_ . -`` into consecutive words; the dictionary words inside a Chinese
    word share its position; removed stop words take no position, so "saving a checkpoint" is
    the phrase "save checkpoint".

    With ``query`` (text a person searches for) a Chinese word stands for itself: the words inside
    it are left out (the index has them for the documents), and so are single characters next to
    real words in the same run ("同卡上残留" searches 残留). Every query term is an index term of
    the same text, so what matches is unchanged; the query just asks for fewer, rarer terms.
    """
    pos = -1
    for match in _TOKEN_RE.finditer(text):
        offset = match.start()
        if match.lastgroup == "han":
            words = _han_words(match.group())
            if query:
                main = [w for w in words if w[3]]
                words = [w for w in main if len(w[0]) > 1] or main
            for word, start, end, is_main in words:
                if not keep_stops and word in STOP_WORDS:
                    continue
                if is_main:
                    pos += 1
                yield word, max(pos, 0), offset + start, offset + end
            continue
        word = match.group().lower()
        if len(word) > MAX_TERM_CHARS or (not keep_stops and word in STOP_WORDS):
            continue
        pos += 1
        yield stem(word), pos, offset, match.end()


def sections(parts: Iterable[tuple[int, str]]) -> str:
    """One index value from (weight, text) parts: the title can weigh 3, the body 1, in one field."""
    return "".join(f"{SECTION}{weight}{text}" for weight, text in parts if text)


def segment(text: str, query: bool = False) -> str:
    """The terms of ``text`` joined by spaces (for a whitespace tokenizer such as SQLite FTS5)."""
    return " ".join(term for term, _pos, _start, _end in terms(text, query=query))


class BilingualAnalyzer(Composable):
    """Whoosh analyzer over :func:`terms`; pickled into the index, holds no jieba state."""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self).__name__)

    def __call__(
        self,
        value: str,
        positions: bool = False,
        chars: bool = False,
        keeporiginal: bool = False,
        removestops: bool = True,
        start_pos: int = 0,
        start_char: int = 0,
        tokenize: bool = True,
        mode: str = "",
        **kwargs: Any,
    ) -> Iterator[Token]:
        token = Token(positions, chars, removestops=removestops, mode=mode, **kwargs)
        token.boost = 1.0
        token.stopped = False
        if not tokenize:
            token.original = token.text = value
            token.pos, token.startchar, token.endchar = start_pos, start_char, start_char + len(value)
            yield token
            return
        base = 0
        for boost, text, offset in _split_sections(value):
            token.boost = boost
            last = -1
            for term, pos, start, end in terms(text, keep_stops=not removestops, query=mode == "query"):
                token.text = term
                if keeporiginal:
                    token.original = text[start:end]
                if positions:
                    token.pos = start_pos + base + pos
                if chars:
                    token.startchar = start_char + offset + start
                    token.endchar = start_char + offset + end
                last = pos
                yield token
            base += last + 1 + SECTION_GAP


def _split_sections(value: str) -> Iterator[tuple[float, str, int]]:
    """(weight, text, offset) of each section of an index value; plain text is one section."""
    marks = list(_SECTION_RE.finditer(value)) if SECTION in value else []
    if not marks:
        yield 1.0, value, 0
        return
    if marks[0].start() > 0:
        yield 1.0, value[: marks[0].start()], 0
    for k, mark in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(value)
        yield float(mark.group(1)), value[mark.end() : end], mark.end()
