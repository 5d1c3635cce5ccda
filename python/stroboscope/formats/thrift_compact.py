"""The Thrift compact protocol, generically: a struct read into field numbers and typed values,
and written back byte for byte the same way.

Parquet keeps its footer (``FileMetaData``) in this protocol. Nothing here knows Parquet's
structs: a struct is a :class:`Struct` (field id -> :class:`Field`, the wire type kept with the
value), so a footer read and written back unchanged is the same bytes, and a caller changes only
the fields it knows (:mod:`stroboscope.formats.parquet_footer`). Written from the Thrift compact
protocol's specification: field headers carry a delta from the previous field id (1-15) or a
zigzag varint id, integers are zigzag varints (i8: one raw byte), doubles 8 bytes little-endian,
binary a varint length and the bytes, lists and sets a header of size and element type, maps a
varint size then one byte of key and value types, booleans of a field in the field header's type.

For large structs read for a few fields, :func:`skip` walks a value without building it, and a
struct or list can be written in parts (:func:`field_header`, :func:`list_header` from the
count, then each element's own bytes, :func:`write_fields`): bytes copied as read stay the same.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BINARY",
    "BOOL",
    "FALSE",
    "I16",
    "I32",
    "I64",
    "LIST",
    "STOP",
    "STRUCT",
    "TRUE",
    "Field",
    "Seq",
    "Struct",
    "ThriftError",
    "field_header",
    "list_header",
    "read_struct",
    "read_value",
    "read_varint",
    "skip",
    "write_fields",
    "write_struct",
    "write_value",
    "zigzag_bytes",
]

STOP = 0
TRUE = 1  # a boolean field's type in its header when it is true
FALSE = 2
BYTE = 3
I16 = 4
I32 = 5
I64 = 6
DOUBLE = 7
BINARY = 8
LIST = 9
SET = 10
MAP = 11
STRUCT = 12
BOOL = TRUE
"""The type a boolean :class:`Field` is kept with (its value says which header it gets)."""
_INTS = frozenset((I16, I32, I64))  # zigzag varints
_MAX_DEPTH = 64
_DOUBLE = struct.Struct("<d")


class ThriftError(ValueError):
    """Bytes that are not a whole compact-protocol struct (the message says where and why)."""


@dataclass
class Field:
    """One value and its wire type. ``value`` is an int (BYTE, I16, I32, I64), a bool (BOOL),
    a float (DOUBLE), bytes (BINARY), a :class:`Struct` (STRUCT), a :class:`Seq` (LIST, SET) or
    a list of (key, value) :class:`Field` pairs (MAP)."""

    type: int
    value: Any


@dataclass
class Seq:
    """A list or set: its elements' wire type and their values (as in :class:`Field`)."""

    elem: int
    values: list[Any]


Struct = dict[int, Field]
"""A struct: field id -> :class:`Field`, in the order read (written in that order)."""


class _Reader:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data = memoryview(data).cast("B")
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ThriftError(f"the struct ends early, at byte {self.pos}")
        b = self.data[self.pos]
        self.pos += 1
        return int(b)

    def varint(self) -> int:
        out = shift = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 63:
                raise ThriftError(f"a varint longer than 10 bytes at byte {self.pos}")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ThriftError(f"{n} bytes asked at byte {self.pos}, past the end")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def value(self, typ: int, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise ThriftError(f"structs nested deeper than {_MAX_DEPTH} at byte {self.pos}")
        if typ in (TRUE, FALSE):  # an element of a list: one byte
            return self.byte() == TRUE
        if typ == BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if typ in (I16, I32, I64):
            return self.zigzag()
        if typ == DOUBLE:
            return _DOUBLE.unpack(self.take(8))[0]
        if typ == BINARY:
            return self.take(self.varint())
        if typ in (LIST, SET):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if size > len(self.data) - self.pos:  # every element takes at least a byte
                raise ThriftError(f"a list of {size} elements at byte {self.pos}, past the end")
            return Seq(elem, [self.value(elem, depth + 1) for _ in range(size)])
        if typ == MAP:
            size = self.varint()
            if size == 0:
                return []
            kinds = self.byte()
            kt, vt = kinds >> 4, kinds & 0x0F
            return [
                (Field(kt, self.value(kt, depth + 1)), Field(vt, self.value(vt, depth + 1)))
                for _ in range(size)
            ]
        if typ == STRUCT:
            return self.struct(depth + 1)
        raise ThriftError(f"unknown type {typ} at byte {self.pos}")

    def struct(self, depth: int) -> Struct:
        out: Struct = {}
        last = 0
        while True:
            head = self.byte()
            if head == STOP:
                return out
            delta, typ = head >> 4, head & 0x0F
            fid = last + delta if delta else self.zigzag()
            last = fid
            if typ in (TRUE, FALSE):
                out[fid] = Field(BOOL, typ == TRUE)
            else:
                out[fid] = Field(typ, self.value(typ, depth))


def read_struct(data: bytes | memoryview, pos: int = 0) -> tuple[Struct, int]:
    """The struct encoded at ``data[pos:]`` and the position after it. ThriftError when the
    bytes end early or hold an unknown type."""
    reader = _Reader(data)
    reader.pos = pos
    return reader.struct(0), reader.pos


def read_value(data: bytes | memoryview, pos: int, typ: int) -> tuple[Any, int]:
    """The value of wire type ``typ`` at ``data[pos:]`` (as in :class:`Field`) and the position
    after it: one field's value read alone."""
    reader = _Reader(data)
    reader.pos = pos
    return reader.value(typ, 0), reader.pos


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        if n < 0:
            raise ThriftError(f"a varint must not be negative, got {n}")
        while n > 0x7F:
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7
        self.out.append(n)

    def zigzag(self, n: int, bits: int) -> None:
        if not -(1 << (bits - 1)) <= n < 1 << (bits - 1):
            raise ThriftError(f"{n} does not fit in i{bits}")
        self.varint((n << 1) ^ (n >> (bits - 1)))

    def value(self, typ: int, value: Any) -> None:
        if typ in (TRUE, FALSE):
            self.out.append(TRUE if value else FALSE)
        elif typ == BYTE:
            self.out.append(value & 0xFF)
        elif typ in (I16, I32, I64):
            self.zigzag(value, {I16: 16, I32: 32, I64: 64}[typ])
        elif typ == DOUBLE:
            self.out += _DOUBLE.pack(value)
        elif typ == BINARY:
            self.varint(len(value))
            self.out += value
        elif typ in (LIST, SET):
            seq: Seq = value
            n = len(seq.values)
            if n < 15:
                self.out.append((n << 4) | seq.elem)
            else:
                self.out.append(0xF0 | seq.elem)
                self.varint(n)
            for v in seq.values:
                self.value(seq.elem, v)
        elif typ == MAP:
            self.varint(len(value))
            if value:
                self.out.append((value[0][0].type << 4) | value[0][1].type)
                for k, v in value:
                    self.value(k.type, k.value)
                    self.value(v.type, v.value)
        elif typ == STRUCT:
            self.struct(value)
        else:
            raise ThriftError(f"unknown type {typ}")

    def struct(self, fields: Struct, last: int = 0) -> None:
        for fid, f in fields.items():
            typ = (TRUE if f.value else FALSE) if f.type in (TRUE, FALSE) else f.type
            if 0 < fid - last <= 15:
                self.out.append(((fid - last) << 4) | typ)
            else:
                self.out.append(typ)
                self.zigzag(fid, 16)
            last = fid
            if f.type not in (TRUE, FALSE):
                self.value(f.type, f.value)
        self.out.append(STOP)


def write_struct(fields: Struct) -> bytes:
    """``fields`` encoded in the compact protocol (the inverse of :func:`read_struct`)."""
    writer = _Writer()
    writer.struct(fields)
    return bytes(writer.out)


def write_value(typ: int, value: Any) -> bytes:
    """The value ``value`` of wire type ``typ`` encoded (the inverse of :func:`read_value`)."""
    writer = _Writer()
    writer.value(typ, value)
    return bytes(writer.out)


def write_fields(fields: Struct, last: int = 0) -> bytes:
    """``fields`` encoded as a part of a struct: the first header's id delta counted from the
    field ``last`` written before them, no STOP after them (a struct written in parts)."""
    writer = _Writer()
    writer.struct(fields, last)
    return bytes(writer.out[:-1])


def zigzag_bytes(n: int, bits: int) -> bytes:
    """The integer ``n`` of an ``i{bits}`` field (16, 32 or 64) as its zigzag varint.
    ThriftError when it does not fit."""
    writer = _Writer()
    writer.zigzag(n, bits)
    return bytes(writer.out)


def field_header(fid: int, last: int, typ: int) -> bytes:
    """The header of field ``fid`` of wire type ``typ`` written after the field ``last`` (a
    delta of 1-15 in the header's byte, else the id after it)."""
    if 0 < fid - last <= 15:
        return bytes((((fid - last) << 4) | typ,))
    return bytes((typ,)) + zigzag_bytes(fid, 16)


def list_header(n: int, elem: int) -> bytes:
    """The header of a list of ``n`` elements of wire type ``elem``: a list written element by
    element (each a value's bytes, a struct's own encoding) once its size is known."""
    if n < 0:
        raise ThriftError(f"a list cannot have {n} elements")
    if n < 15:
        return bytes(((n << 4) | elem,))
    writer = _Writer()
    writer.varint(n)
    return bytes((0xF0 | elem,)) + writer.out


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``data[pos:]`` and the position after it."""
    out = shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise ThriftError(f"the struct ends early, at byte {pos}")
        b = data[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, pos
        shift += 7
        if shift > 63:
            raise ThriftError(f"a varint longer than 10 bytes at byte {pos}")


def skip(data: bytes, pos: int, typ: int, depth: int = 0) -> int:
    """The position after the value of wire type ``typ`` at ``data[pos:]``, walked without
    building it (a boolean as a list's element: its byte; as a field: nothing, its value is in
    the header's type). ThriftError when the bytes end early or hold an unknown type."""
    try:
        return _skip(data, pos, typ, depth)
    except IndexError:
        raise ThriftError(f"the struct ends early, past byte {pos}") from None


def _skip(data: bytes, pos: int, typ: int, depth: int) -> int:
    # Varints walked in line (no call per integer): most of a Parquet footer is integers.
    if typ in _INTS:
        while data[pos] & 0x80:
            pos += 1
        return pos + 1
    if depth > _MAX_DEPTH:
        raise ThriftError(f"structs nested deeper than {_MAX_DEPTH} at byte {pos}")
    if typ == STRUCT:
        while True:
            head = data[pos]
            pos += 1
            if head == STOP:
                return pos
            if not head & 0xF0:  # the id follows as a zigzag varint
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            t = head & 0x0F
            if t in _INTS:
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            elif t == BINARY:
                n, pos = read_varint(data, pos)
                pos += n
            elif t not in (TRUE, FALSE):
                pos = _skip(data, pos, t, depth + 1)
    if typ == BINARY:
        n, pos = read_varint(data, pos)
        if pos + n > len(data):
            raise ThriftError(f"{n} bytes asked at byte {pos}, past the end")
        return pos + n
    if typ in (LIST, SET):
        head = data[pos]
        pos += 1
        size, elem = head >> 4, head & 0x0F
        if size == 15:
            size, pos = read_varint(data, pos)
        if size > len(data) - pos:  # every element takes at least a byte
            raise ThriftError(f"a list of {size} elements at byte {pos}, past the end")
        if elem in _INTS:
            for _ in range(size):
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            return pos
        for _ in range(size):
            pos = _skip(data, pos, elem, depth + 1)
        return pos
    if typ in (TRUE, FALSE, BYTE):
        return pos + 1
    if typ == DOUBLE:
        return pos + 8
    if typ == MAP:
        size, pos = read_varint(data, pos)
        if size:
            kinds = data[pos]
            pos += 1
            for _ in range(size):
                pos = _skip(data, pos, kinds >> 4, depth + 1)
                pos = _skip(data, pos, kinds & 0x0F, depth + 1)
        return pos
    raise ThriftError(f"unknown type {typ} at byte {pos}")
