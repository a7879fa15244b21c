#!/usr/bin/env python3
"""Prints the scalars of TensorBoard event files, without TensorBoard.

    tests/tools/read_tfevents.py runs/NAME/tensorboard            # every event file in a dir
    tests/tools/read_tfevents.py events.out.tfevents.* --tag train/loss

Output: one "step<TAB>tag<TAB>value" line per scalar, in file order. A
SessionLog START event (a resumed run writes one at the first step it trains
again) drops the scalars read so far at that step and later, as TensorBoard
does; --keep-restarts prints them anyway. Every
record's framing is checked (TFRecord length and data CRC-32C); a damaged
record stops the file with a message on stderr and exit status 1. Only the
standard library is used: CRC-32C (zlib has only CRC-32) and the protobuf
wire format are decoded here.
"""
import argparse
import os
import struct
import sys


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """Yields each record's data; raises ValueError on damaged framing."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0
    while pos < len(buf):
        if len(buf) - pos < 12:
            raise ValueError(f"byte {pos}: truncated record header")
        length_bytes = buf[pos:pos + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", buf[pos + 8:pos + 12])
        if masked_crc(length_bytes) != length_crc:
            raise ValueError(f"byte {pos}: length CRC mismatch")
        data = buf[pos + 12:pos + 12 + length]
        if len(data) != length or len(buf) < pos + 16 + length:
            raise ValueError(f"byte {pos}: truncated record data")
        (data_crc,) = struct.unpack("<I", buf[pos + 12 + length:pos + 16 + length])
        if masked_crc(data) != data_crc:
            raise ValueError(f"byte {pos}: data CRC mismatch")
        yield data
        pos += 16 + length


def fields(msg):
    """Yields (field number, wire type, value) of a protobuf message: ints
    for varints, bytes for fixed64/fixed32/length-delimited."""
    pos = 0

    def varint():
        nonlocal pos
        shift = value = 0
        while True:
            b = msg[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value

    while pos < len(msg):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            yield field, wire, varint()
        elif wire == 1:
            yield field, wire, msg[pos:pos + 8]
            pos += 8
        elif wire == 2:
            n = varint()
            yield field, wire, msg[pos:pos + n]
            pos += n
        elif wire == 5:
            yield field, wire, msg[pos:pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def tensor_scalar(msg):
    """The value of a scalar TensorProto (dtype float or double), or None."""
    for field, wire, v in fields(msg):
        if field == 4 and len(v) in (4, 8):          # tensor_content
            return struct.unpack("<f" if len(v) == 4 else "<d", v)[0]
        if field in (5, 6):                           # float_val / double_val, packed or not
            if wire == 2:
                return struct.unpack("<f" if field == 5 else "<d", v[:4 if field == 5 else 8])[0]
            return struct.unpack("<f" if wire == 5 else "<d", v)[0]
    return None


def session_start(msg):
    """True when a SessionLog message has status START (1)."""
    return any(f == 1 and w == 0 and v == 1 for f, w, v in fields(msg))


def scalars(path):
    """Yields (step, tag, value) for every scalar in an event file, and
    (step, None, None) for a SessionLog START."""
    for data in records(path):
        step, summary, start = 0, None, False
        for field, wire, v in fields(data):
            if field == 2 and wire == 0:
                step = v - (1 << 64) if v >= 1 << 63 else v
            elif field == 5 and wire == 2:
                summary = v
            elif field == 7 and wire == 2:
                start = session_start(v)
        if start:
            yield step, None, None
        if summary is None:
            continue
        for field, _, value in fields(summary):
            if field != 1:
                continue
            tag, val = None, None
            for f2, w2, v2 in fields(value):
                if f2 == 1:
                    tag = v2.decode("utf-8", "replace")
                elif f2 == 2 and w2 == 5:
                    val = struct.unpack("<f", v2)[0]
                elif f2 == 8 and w2 == 2:
                    val = tensor_scalar(v2)
            if tag is not None and val is not None:
                yield step, tag, val


def event_files(paths):
    for p in paths:
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                if "tfevents" in name:
                    yield os.path.join(p, name)
        else:
            yield p


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="event files or directories holding them")
    ap.add_argument("--tag", action="append", help="only these tags (repeatable)")
    ap.add_argument("--keep-restarts", action="store_true",
                    help="keep the scalars a SessionLog START would drop")
    args = ap.parse_args()
    status = 0
    kept = []
    for path in event_files(args.paths):
        try:
            for step, tag, value in scalars(path):
                if tag is None:
                    if not args.keep_restarts:
                        kept = [x for x in kept if x[0] < step]
                elif not args.tag or tag in args.tag:
                    kept.append((step, tag, value))
        except (ValueError, IndexError, struct.error) as e:
            print(f"{path}: {e or 'malformed event'}", file=sys.stderr)
            status = 1
    for step, tag, value in kept:
        print(f"{step}\t{tag}\t{value!r}")
    return status


if __name__ == "__main__":
    sys.exit(main())
