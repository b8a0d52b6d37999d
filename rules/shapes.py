"""Digit-blind line shapes: one regex run per shape of line, not per line.

``line.translate(BLIND)`` writes every ASCII digit as ``0`` and keeps the length. A pattern that
treats all ten digits alike (no literal digit, no class holding some digits but not others, no
back-reference) matches a line exactly where it matches the line's shape, with the same group
spans, because its automaton cannot tell one digit from another. So for such a rule the spans
found on one line hold for every line of the same shape: a rank is read by slicing at the cached
span. Rules whose patterns hold literal digits (``Xid 79``, ``error 13``) are not digit-blind and
always run RE2 on the line itself.
"""

from __future__ import annotations

import re
import re._constants as sre  # type: ignore[import-not-found]
import re._parser as sre_parse  # type: ignore[import-not-found]
from typing import Any

BLIND = bytes.maketrans(b"0123456789", b"0000000000")
_DIGITS = [ord(d) for d in "0123456789"]
_DIGIT_IN = {sre.CATEGORY_DIGIT: True, sre.CATEGORY_NOT_DIGIT: False, sre.CATEGORY_WORD: True,
             sre.CATEGORY_NOT_WORD: False, sre.CATEGORY_SPACE: False, sre.CATEGORY_NOT_SPACE: True}


def digit_blind(pattern: str) -> bool:
    """Does ``pattern`` treat all ten ASCII digits alike? ``False`` when it cannot tell (syntax Python's
    parser does not know, as RE2's ``\\pN``), so such a rule simply takes the slow path."""
    try:
        tree = sre_parse.parse(pattern)
    except (re.error, ValueError, TypeError, OverflowError, RecursionError):
        return False
    return _blind(list(tree))


def _blind(items: list[tuple[Any, Any]]) -> bool:
    for op, av in items:
        if op in (sre.LITERAL, sre.NOT_LITERAL):
            if av in _DIGITS:
                return False
        elif op is sre.IN:
            if len({_in_class(av, d) for d in _DIGITS}) != 1:
                return False
        elif op is sre.SUBPATTERN:
            if not _blind(list(av[3])):
                return False
        elif op is sre.BRANCH:
            if not all(_blind(list(p)) for p in av[1]):
                return False
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            if not _blind(list(av[2])):
                return False
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            if not _blind(list(av[1])):
                return False
        elif op is sre.ATOMIC_GROUP:
            if not _blind(list(av)):
                return False
        elif op not in (sre.ANY, sre.AT, sre.CATEGORY):
            return False  # back-references, conditionals: a digit may matter
    return True


def _in_class(items: list[tuple[Any, Any]], code: int, categories: dict[Any, bool] = _DIGIT_IN,
              otherwise: bool = False) -> bool:
    """Is the character ``code`` in the class ``[...]`` given by its parsed items? ``categories`` says
    which categories (``\\d``, ``\\s``, ...) hold it; ``otherwise`` answers for any other category or item."""
    negate = False
    found = False
    for op, av in items:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            found = found or av == code
        elif op is sre.RANGE:
            found = found or av[0] <= code <= av[1]
        elif op is sre.CATEGORY:
            found = found or categories.get(av, otherwise)
        else:
            found = found or otherwise
    return found != negate


_NEWLINE = 10
_NEWLINE_IN = {sre.CATEGORY_DIGIT: False, sre.CATEGORY_NOT_DIGIT: True, sre.CATEGORY_WORD: False,
               sre.CATEGORY_NOT_WORD: True, sre.CATEGORY_SPACE: True, sre.CATEGORY_NOT_SPACE: False,
               sre.CATEGORY_LINEBREAK: True, sre.CATEGORY_NOT_LINEBREAK: False}


def newline_free(pattern: str) -> bool:
    """Can no match of ``pattern`` contain a newline (so every match lies inside one line)? ``False`` when
    it cannot tell: dot-all flags, back-references, syntax Python's parser does not know."""
    try:
        tree = sre_parse.parse(pattern)
    except (re.error, ValueError, TypeError, OverflowError, RecursionError):
        return False
    if tree.state.flags & sre.SRE_FLAG_DOTALL:
        return False
    return _no_newline(list(tree))


def _no_newline(items: list[tuple[Any, Any]]) -> bool:
    for op, av in items:
        if op is sre.LITERAL:
            if av == _NEWLINE:
                return False
        elif op is sre.NOT_LITERAL:
            if av != _NEWLINE:
                return False
        elif op is sre.IN:
            if _in_class(av, _NEWLINE, _NEWLINE_IN, otherwise=True):
                return False
        elif op is sre.SUBPATTERN:
            if av[1] & sre.SRE_FLAG_DOTALL or not _no_newline(list(av[3])):
                return False
        elif op is sre.BRANCH:
            if not all(_no_newline(list(p)) for p in av[1]):
                return False
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            if not _no_newline(list(av[2])):
                return False
        elif op is sre.ATOMIC_GROUP:
            if not _no_newline(list(av)):
                return False
        elif op is sre.ANY:
            continue  # without dot-all, '.' stops at a newline (Python, RE2 and Hyperscan alike)
        elif op not in (sre.AT,):
            return False  # look-arounds, back-references, conditionals: not told
    return True
