"""Text helpers shared by every layer (imports nothing of gigpo)."""

from __future__ import annotations


def clean_text(text: str) -> str:
    """``text`` as a tokenizer can take it: surrogate pairs joined, lone surrogates (``\\ud800``,
    from a corpus or an env observation decoded with ``surrogateescape``) replaced by U+FFFD.

    Tokenizers (and UTF-8 files) refuse a lone surrogate; one stray character in user data must
    not stop prompt building.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
