"""Small real files for the chat page's upload tests, built here so no binary is committed: a
coloured PNG any browser decodes (the page's preview), and others whose signatures the sniffer
knows (a PDF's header, a plain zip archive)."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int = 4, height: int = 4, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A valid RGB PNG of one colour (IHDR, one IDAT, IEND), as the PNG specification lays it out."""
    row = b"\x00" + bytes(rgb) * width  # filter type 0 per scanline
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(row * height))
        + _chunk(b"IEND", b"")
    )


def pdf(text: str = "hello") -> bytes:
    """The smallest shape a PDF reader opens: enough for the sniffer's %PDF- check."""
    body = f"%PDF-1.4\n% {text}\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
    return body.encode()


def zip_archive() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("notes/a.txt", "not an office document")
    return out.getvalue()
