"""Byte-level tokenizer of the built-in engine: token id = UTF-8 byte value (vocab 256).

No files, no downloads, no special tokens. Not a general tokenizer: it exists so that the toy
target model needs nothing outside the repository.
"""

from __future__ import annotations

VOCAB_SIZE = 256


def encode(text: str) -> list[int]:
    """Token ids of `text`: its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def decode(ids: list[int]) -> str:
    """Text of `ids`; invalid UTF-8 sequences become U+FFFD."""
    return bytes(ids).decode("utf-8", errors="replace")


class IncrementalDecoder:
    """Streams text from token ids, returning only complete UTF-8 characters.

    Bytes of a character that is not complete yet are held back until the next `push`
    (or `flush`, which returns them with replacement characters).
    """

    def __init__(self) -> None:
        self._pending = b""

    def push(self, ids: list[int]) -> str:
        data = self._pending + bytes(ids)
        cut = _complete_prefix_len(data)
        self._pending = data[cut:]
        return data[:cut].decode("utf-8", errors="replace")

    def flush(self) -> str:
        data, self._pending = self._pending, b""
        return data.decode("utf-8", errors="replace")


def _complete_prefix_len(data: bytes) -> int:
    """Length of the longest prefix of `data` that does not end inside a UTF-8 character."""
    # Look back at most 3 bytes for the lead byte of a possibly unfinished character.
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:  # ASCII: everything up to here is complete
            return len(data)
        if byte >= 0xC0:  # lead byte: how long should its character be?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    # Only continuation bytes (or invalid data): let the replacement decoder handle it.
    return len(data)
