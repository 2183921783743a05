"""A document's text (docs/media.md, "Documents"): PDF (pypdf), Word .docx (python-docx), Excel
.xlsx (openpyxl), and plain text, Markdown and CSV, bounded by the workspace's max_pages and
max_chars, with a note when cut.

Each library is imported when a document of its kind arrives, never at start. Extraction runs in
the turn: it stops between pages when the turn's deadline draws near (the rest is cut, with the
same note), so a 2,000-page PDF never holds a lane past its deadline. A file the library cannot
read (encrypted, corrupt) gives no text and a note, never an error of the turn.
"""

from __future__ import annotations

import io
import logging
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from shared.deadline import current, remaining

log = logging.getLogger(__name__)

PDF: Final = "application/pdf"
DOCX: Final = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX: Final = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
TEXT_TYPES: Final = frozenset(
    {"text/plain", "text/markdown", "text/csv", "text/x-markdown", "text/tab-separated-values"}
)
# Stop reading pages with less than this left before the turn's deadline: the model call and
# the commit need the rest.
RESERVE_S: Final = 30.0


@dataclass(frozen=True)
class Extracted:
    text: str
    pages: int | None  # pages (PDF) or sheets (XLSX) read; None where a format has none
    note: str | None = None  # why the text is cut or missing, for the model and the user


def readable(mime_type: str, data: bytes = b"") -> str | None:
    """The document type we read `mime_type` (sniffed) as, or None. An Office file sniffed as a
    bare ZIP is told apart by the part it must contain."""
    if mime_type in (PDF, DOCX, XLSX) or mime_type in TEXT_TYPES:
        return mime_type
    if mime_type.startswith("text/"):
        # Any other text the sniffer kept as text (HTML, source code, logs): read as it is.
        return "text/plain"
    if mime_type == "application/zip" and data:
        try:
            names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
        except zipfile.BadZipFile:
            return None
        if "word/document.xml" in names:
            return DOCX
        if "xl/workbook.xml" in names:
            return XLSX
    return None


def extract_text(data: bytes, mime_type: str, *, max_pages: int, max_chars: int) -> Extracted:
    kind = readable(mime_type, data)
    if kind is None:
        return Extracted("", None, f"a {mime_type} file, which is not read")
    try:
        if kind == PDF:
            return _bounded(_pdf(data), max_pages, max_chars, "pages")
        if kind == DOCX:
            return _bounded(_docx(data), None, max_chars, "")
        if kind == XLSX:
            return _bounded(_xlsx(data), max_pages, max_chars, "sheets")
        return _bounded(iter([data.decode("utf-8", errors="replace")]), None, max_chars, "")
    # Any library's failure on a bad file (each raises its own types): the turn goes on without it.
    except Exception as exc:  # noqa: BLE001
        log.warning("document not read", extra={"mime_type": kind, "error": type(exc).__name__})
        return Extracted("", None, f"the file could not be read ({type(exc).__name__})")


def _bounded(units: Iterator[str], max_pages: int | None, max_chars: int, unit: str) -> Extracted:
    parts: list[str] = []
    size, read = 0, 0
    note = None
    for text in units:
        if max_pages is not None and read >= max_pages:
            note = f"cut after {max_pages} {unit} (this workspace's max_pages)"
            break
        left = remaining(current())
        if left is not None and left < RESERVE_S:
            note = f"cut after {read} {unit or 'parts'}: the turn's time ran short"
            break
        read += 1
        if size + len(text) > max_chars:
            parts.append(text[: max(0, max_chars - size)])
            note = f"cut at {max_chars:,} characters (this workspace's max_chars)"
            break
        parts.append(text)
        size += len(text) + 2
    return Extracted("\n\n".join(p for p in parts if p.strip()).strip(), read if unit else None, note)


def _pdf(data: bytes) -> Iterator[str]:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        reader.decrypt("")  # a PDF locked with no user password (a common "protected" one) opens
    for page in reader.pages:
        yield page.extract_text() or ""


def _docx(data: bytes) -> Iterator[str]:
    from docx import Document

    document = Document(io.BytesIO(data))
    for paragraph in document.paragraphs:
        yield paragraph.text
    for table in document.tables:
        for row in table.rows:
            yield " | ".join(cell.text for cell in row.cells)


def _xlsx(data: bytes) -> Iterator[str]:
    from openpyxl import load_workbook  # type: ignore[import-untyped]  # ships no type hints

    # read_only streams the rows; data_only reads the values Excel saved, not the formulas.
    workbook = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        for sheet in workbook.worksheets:
            rows = (
                ",".join("" if v is None else str(v) for v in row)
                for row in sheet.iter_rows(values_only=True)
            )
            yield f"## Sheet: {sheet.title}\n" + "\n".join(r for r in rows if r.strip(","))
    finally:
        workbook.close()
