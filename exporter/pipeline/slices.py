"""Byte-slice arithmetic over one Arrow buffer: the vectorised pieces of the text parse.

Arrow's compute kernels match and cut whole strings, but have no kernel for "the bytes
between the third and fourth quote of each line". The parse therefore works on the body's
one contiguous buffer as numpy arrays: a token is a (start, end) pair of byte offsets, and
only the tokens the exporter reads are gathered into new Arrow string arrays. No loop runs
per line; the loops below run per byte of the longest token, over all lines at once.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def split_lines(data: bytes | memoryview, padding: int = 0) -> pa.LargeStringArray:
    """Lines of UTF-8 text, each keeping its "\\n" (the exposition format ends lines at
    "\\n" only: a raw "\\r" may sit inside a label value). Zero-copy over `data`, whose
    last `padding` bytes are zeros and not text (`buffers` then needs no padded copy);
    bytes that are not UTF-8 are replaced (U+FFFD), so one bad byte spoils one line at
    most."""
    raw = np.frombuffer(data, np.uint8)[:len(data) - padding]
    ends = _positions(raw, ord("\n")) + 1
    if len(ends) == 0 or ends[-1] != len(raw):
        ends = np.append(ends, len(raw))
    offsets = np.concatenate(([0], ends)).astype(np.int64)
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    if not len(raw) or raw.max() < 0x80:  # ASCII is UTF-8: no validation, a third the time
        return pa.LargeStringArray.from_buffers(len(ends), *buffers[1:])
    lines = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(ends), buffers)
    try:
        return lines.cast(pa.large_string())
    except pa.ArrowInvalid:
        fixed = bytes(raw).decode("utf-8", errors="replace").encode()
        return split_lines(fixed)


def _positions(raw: np.ndarray, byte: int, chunk: int = 1 << 20) -> np.ndarray:
    """Where `byte` is in `raw`, searched a megabyte at a time: the comparison's array then
    stays in cache, a quarter faster on a big body (docs/design.md, "Fetching and parsing
    bodies")."""
    found = [np.flatnonzero(raw[at:at + chunk] == byte) + at for at in range(0, len(raw), chunk)]
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def only(strings: pa.LargeStringArray, keep: pa.BooleanArray) -> pa.LargeStringArray:
    """`strings` with those not kept null, over the same buffers. Arrow's format lets a null
    slot span bytes, so nothing is copied, where `filter` copies the kept bytes into fresh
    memory, most of the body faulted in 4 KB pages (the system pool's buffers get no huge
    pages; numpy's arrays do; docs/design.md, "Fetching and parsing bodies")."""
    _, offsets, data = strings.buffers()
    if strings.offset == 0 and strings.null_count == 0 and keep.offset == 0 \
            and keep.null_count == 0:
        validity = keep.buffers()[1]
    else:  # the bitmap counts from the buffers' start, not from the array's offset
        bits = np.zeros(strings.offset + len(strings), bool)
        bits[strings.offset:] = pc.and_(keep.fill_null(False), strings.is_valid()).to_numpy(
            zero_copy_only=False)
        validity = pa.py_buffer(np.packbits(bits, bitorder="little"))
    return pa.LargeStringArray.from_buffers(len(strings), offsets, data, validity,
                                            offset=strings.offset)


PADDING = 16  # zero bytes after a text that `_words` reads into, at least


def buffers(lines: pa.LargeStringArray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a large_string array as numpy arrays: line i is
    data[offsets[i]:offsets[i + 1]]. `data` has PADDING zero bytes or more after the text,
    so that `_words` may read 8 bytes at any offset: the array's own buffer where it has
    them (`split_lines` over padded text), else a copy (`padded`)."""
    _, offsets, data = lines.buffers()
    off = np.frombuffer(offsets, np.int64)[lines.offset: lines.offset + len(lines) + 1]
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    spare = raw[off[-1]:off[-1] + PADDING]
    if len(spare) == PADDING and not spare.any():
        return off, raw[:off[-1] + PADDING]
    return off, padded(raw[: off[-1]])


def padded(raw: np.ndarray) -> np.ndarray:
    """`raw` followed by PADDING zero bytes."""
    out = np.zeros(len(raw) + PADDING, np.uint8)
    out[: len(raw)] = raw
    return out


@functools.cache
def _byte_set(chars: bytes) -> np.ndarray:
    """A 256-entry table, True at the bytes of `chars`: one gather tests a byte."""
    table = np.zeros(256, bool)
    table[np.frombuffer(chars, np.uint8)] = True
    return table


def _forward(data: np.ndarray, pos: np.ndarray, stop: np.ndarray, chars: bytes,
             over: bool) -> np.ndarray:
    """Each position moved forward while its byte is (`over`) or is not one of `chars`,
    never beyond its `stop`. The first step runs over whole arrays (most positions move
    once or not at all), the next ones over those still moving."""
    moves = _byte_set(chars) if over else ~_byte_set(chars)
    pos = pos.copy()
    active = np.flatnonzero((pos < stop) & moves[data[pos]])  # `data` is padded
    while len(active):
        at = pos[active] + 1
        pos[active] = at
        active = active[(at < stop[active]) & moves[data[at]]]
    return pos


def skip(data: np.ndarray, pos: np.ndarray, stop: np.ndarray, chars: bytes) -> np.ndarray:
    """Each position moved forward past any of `chars`, never beyond its `stop`."""
    return _forward(data, pos, stop, chars, over=True)


def until(data: np.ndarray, pos: np.ndarray, stop: np.ndarray, chars: bytes) -> np.ndarray:
    """Each position moved forward to the first of `chars` (or its `stop`)."""
    return _forward(data, pos, stop, chars, over=False)


def back(data: np.ndarray, end: np.ndarray, start: np.ndarray, chars: bytes) -> np.ndarray:
    """Each end moved back over any of `chars` before it, never below its `start`."""
    moves = _byte_set(chars)
    end = end.copy()
    active = np.flatnonzero((end > start) & moves[data[end - 1]])
    while len(active):
        at = end[active] - 1
        end[active] = at
        active = active[(at > start[active]) & moves[data[at - 1]]]
    return end


def after_last(data: np.ndarray, end: np.ndarray, start: np.ndarray, byte: int) -> np.ndarray:
    """Each span's position just past its last `byte` in data[start:end], `start` where it
    has none: `back` over every other byte, eight bytes a step (`data` from `padded`). A
    line's label set closes at its last "}", before a value and a timestamp of up to ~30
    bytes: one byte a step took nearly twice as long (docs/design.md, "Fetching and parsing
    bodies")."""
    words = _words(data)
    found = start.copy()
    active = np.flatnonzero(end > start)
    hi = end[active]
    while len(active):
        lo = start[active]
        base = np.maximum(hi - 8, 0)  # the word of the 8 bytes before `hi` (fewer at 0)
        x = words[base] ^ (np.uint64(byte) * _ONES)  # a zero byte where `byte` is
        zero = ~(((x & _LOW7) + _LOW7) | x | _LOW7)  # its top bit set, exactly there
        flags = (((zero >> np.uint64(7)) * _GATHER) >> np.uint64(56)).astype(np.intp)
        flags &= _SPAN[np.clip(lo - base, 0, 8), hi - base]  # bit k: data[base + k], in span
        hit = flags != 0
        found[active[hit]] = base[hit] + _HIGHEST[flags[hit]] + 1
        more = ~hit & (base > lo)
        active, hi = active[more], base[more]
    return found


_ONES, _LOW7 = np.uint64(0x0101010101010101), np.uint64(0x7F7F7F7F7F7F7F7F)
_GATHER = np.uint64(0x0102040810204080)  # byte k's low bit to bit k of the top byte
# _SPAN[a, b]: bits a to b - 1 set; _HIGHEST[m]: the highest bit set in m (m > 0)
_SPAN = np.array([[(1 << b) - (1 << a) if b > a else 0 for b in range(9)] for a in range(9)],
                 np.intp)
_HIGHEST = np.array([m.bit_length() - 1 for m in range(256)], np.intp)


def _words(data: np.ndarray) -> np.ndarray:
    """`data` (PADDING zero bytes after its text, `buffers`) read as a little-endian uint64
    at every byte offset: one gather fetches the 8 bytes that start anywhere in the text."""
    return np.ndarray((len(data) - 8,), "<u8", data, strides=(1,))


# _MASKS[k]: the low k bytes of a uint64 set (k = 0..8)
_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], np.uint64)


def _first_bytes(length: np.ndarray, word: np.ndarray) -> np.ndarray:
    """`word` with its bytes from `length` on zeroed (length clipped to 0..8)."""
    return word & _MASKS.take(np.clip(length, 0, 8))


def views(data: np.ndarray, start: np.ndarray, end: np.ndarray,
          present: np.ndarray | None = None) -> pa.StringViewArray:
    """The slices data[start:end] as a string_view array over `data` itself: 16 bytes per
    slice (its length, then its bytes inline up to 12, else a 4-byte prefix and its
    offset), whatever the slices' lengths; null where `present` is False. Slices are cut
    at ASCII delimiters, so they are valid UTF-8 when `data` is. `data` < 2 GiB."""
    n = len(start)
    length = np.maximum(end - start, 0).astype(np.int64)
    if present is not None:
        length[~present] = 0
    start = np.where(length > 0, start, 0)
    words = _words(data)
    lo = _first_bytes(length, words[start])
    long = length > 12
    out = np.empty((n, 2), np.uint64)
    out[:, 0] = length.astype(np.uint64) | (lo << np.uint64(32))
    second = np.where(long, start.astype(np.uint64) << np.uint64(32), lo >> np.uint64(32))
    # bytes 8-12 inline: one gather more, for the few slices of 9 to 12 bytes only
    nine = np.flatnonzero((length > 8) & ~long)
    second[nine] |= _first_bytes(length[nine] - 8, words[start[nine] + 8]) << np.uint64(32)
    out[:, 1] = second
    validity = None
    if present is not None and not present.all():
        validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    return pa.Array.from_buffers(pa.string_view(), n,
                                 [validity, pa.py_buffer(out), pa.py_buffer(data)])


def distinct(data: np.ndarray, start: np.ndarray, end: np.ndarray,
             present: np.ndarray | None = None) -> pa.DictionaryArray:
    """`views` dictionary-encoded, its distinct values copied out as large_string: a label
    repeated on every sample of a topic is copied once."""
    encoded = pc.dictionary_encode(views(data, start, end, present))
    return pa.DictionaryArray.from_arrays(encoded.indices,
                                          encoded.dictionary.cast(pa.large_string()))


def short_key(data: np.ndarray, start: np.ndarray, end: np.ndarray,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(length, first 8 bytes, last 8 bytes) of each slice, the bytes as little-endian
    uint64 (zero-padded): equal slices have equal keys, and slices of at most 16 bytes
    with equal keys are equal."""
    length = np.maximum(end - start, 0)
    words = _words(data)
    head = _first_bytes(length, words[np.maximum(start, 0)])
    tail = np.where(length > 8, words[np.maximum(end - 8, 0)], np.uint64(0))
    return length, head, tail


def middle(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Bytes 8 to 16 of each slice as a little-endian uint64 (zero-padded, 0 for slices of
    at most 8 bytes): with `short_key`, slices of at most 24 bytes with equal keys and
    middles are equal."""
    length = np.maximum(end - start, 0)
    words = _words(data)
    at = np.minimum(np.maximum(start, 0) + 8, len(words) - 1)
    return _first_bytes(length - 8, words[at])


def middle_of(word: bytes) -> np.uint64:
    """`middle` of one literal word."""
    buffer = padded(np.frombuffer(word, np.uint8))
    return middle(buffer, np.array([0]), np.array([len(word)]))[0]


def short_key_of(word: bytes) -> tuple[int, np.uint64, np.uint64]:
    """`short_key` of one literal word."""
    buffer = padded(np.frombuffer(word, np.uint8))
    length, head, tail = short_key(buffer, np.array([0]), np.array([len(word)]))
    return int(length[0]), head[0], tail[0]


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0xEDB88320), table >> 1)
    return table.astype(np.uint32)


_CRC_TABLE = _crc_table()


def crc32(strings: pa.Array) -> pa.Array:
    """CRC-32 (zlib's, java.util.zip.CRC32's) of each string's UTF-8 bytes, as int64;
    null for null. Table-driven, one step per byte position over all strings at once."""
    strings = strings.cast(pa.large_string())
    off, data = buffers(strings)
    start, lengths = off[:-1], np.diff(off)
    crc = np.full(len(strings), 0xFFFFFFFF, np.uint32)
    for i in range(int(lengths.max(initial=0))):
        active = np.flatnonzero(lengths > i)
        byte = data[start[active] + i]
        crc[active] = _CRC_TABLE[(crc[active] ^ byte) & 0xFF] ^ (crc[active] >> 8)
    out = (crc ^ np.uint32(0xFFFFFFFF)).astype(np.int64)
    return pa.array(out, mask=strings.is_null().to_numpy(zero_copy_only=False))
