"""Real files for the media tests, made here (no binary fixtures): a PNG of a given size, a PDF
with text on each page, a .docx and an .xlsx written by their own libraries; and `stored`, which
puts one in a MediaStore the way the turn's fetch does (shared.media.ids) and returns the
Attachment that names it."""

from __future__ import annotations

import hashlib
import io
import struct
import zlib

from shared.media.ids import media_id
from shared.models import Attachment, MediaKind
from shared.models.media import MediaItem
from shared.ports import MediaStore


def png(width: int, height: int) -> bytes:
    """A valid grey PNG of this size."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def pdf(pages: list[str]) -> bytes:
    """A PDF 1.4 file with one line of Helvetica text per page (offsets computed, so pypdf reads
    it without repairs)."""
    objects: list[bytes] = []
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            f"/Contents {5 + 2 * i} 0 R >>".encode()
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def docx(paragraphs: list[str]) -> bytes:
    from docx import Document

    document = Document()
    for text in paragraphs:
        document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def xlsx(rows: list[list[object]]) -> bytes:
    from openpyxl import Workbook  # type: ignore[import-untyped]

    workbook = Workbook()
    sheet = workbook.active
    sheet.title = "Budget"
    for row in rows:
        sheet.append(row)
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def stored_item(
    *, name: str | None, mime_type: str, kind: MediaKind, data: bytes = b"", workspace_id: str = "ws1"
) -> MediaItem:
    """A MediaItem as the fetch records one (not stored anywhere)."""
    return MediaItem(
        id=media_id(workspace_id, "web", name or "unnamed"),
        workspace_id=workspace_id,
        session_id="web.s1",
        user_id="u-ada",
        channel="web",
        source_id=name or "unnamed",
        kind=kind,
        mime_type=mime_type,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        name=name,
    )


def stored(
    store: MediaStore,
    workspace_id: str,
    data: bytes,
    *,
    kind: MediaKind,
    mime_type: str,
    name: str,
    user_id: str = "u-ada",
    session_id: str = "web.s1",
    channel: str = "web",
) -> Attachment:
    item = MediaItem(
        id=media_id(workspace_id, channel, name),
        workspace_id=workspace_id,
        session_id=session_id,
        user_id=user_id,
        channel=channel,
        source_id=name,
        kind=kind,
        mime_type=mime_type,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        name=name,
    )
    store.put(item, data)
    return Attachment(kind=kind, id=name, name=name, mime_type=mime_type, size=len(data), media_id=item.id)
