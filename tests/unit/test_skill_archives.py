"""Unpacking a skill's archive never trusts its sizes (shared.skills.install): declared sizes are
checked before a byte is read, a member that holds more than it declares is cut while it is read,
and the whole uncompressed stream is capped. Memory is measured with tracemalloc, as a bound
proportional to the caps (never a time).

The bombs are built here: zeros compress about a thousand to one, so a 64 MiB member is a ~64 KiB
.tar.gz, the shape of the one in issue 25 (96 KiB raising the peak by 110 MiB)."""

from __future__ import annotations

import io
import struct
import tarfile
import tracemalloc
import zipfile
from collections.abc import Callable

import pytest

from shared.skills.install import (
    MAX_ENTRIES,
    MAX_SKILL_BYTES,
    MAX_UNPACKED_BYTES,
    InstallError,
    unpack,
)

MIB = 1024 * 1024
SKILL_MD = b"---\nname: bomb\ndescription: A skill.\n---\nBody.\n"
# Far beyond every cap: on a reader that believes the archive, this is what it would hold.
HUGE = 8 * MAX_SKILL_BYTES


class Zeros(io.RawIOBase):
    """`size` zero bytes, read in pieces: the test builds a bomb without holding it."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def tar_gz(members: list[tuple[str, int]], *, kind: bytes = tarfile.REGTYPE) -> bytes:
    """A .tar.gz of (name, size) members of zeros, SKILL.md first; `kind` is the members' type."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=9) as archive:
        info = tarfile.TarInfo("bomb/SKILL.md")
        info.size = len(SKILL_MD)
        archive.addfile(info, io.BytesIO(SKILL_MD))
        for name, size in members:
            info = tarfile.TarInfo(name)
            info.size, info.type = size, kind
            archive.addfile(info, Zeros(size))
    return buffer.getvalue()


def peak_while(action: Callable[[], object]) -> tuple[int, BaseException | None]:
    """The peak of memory allocated while `action` ran, and what it raised."""
    tracemalloc.start()
    try:
        action()
        raised = None
    except InstallError as exc:
        raised = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak, raised


def test_a_member_declaring_more_than_the_cap_is_refused_before_it_is_read() -> None:
    data = tar_gz([("bomb/references/big.md", HUGE)])
    assert len(data) < HUGE // 500  # a bomb indeed

    peak, raised = peak_while(lambda: unpack(data, "bomb.tar.gz"))

    # Nothing of the member was read: far under one cap's worth, where believing it costs eight.
    assert peak < MAX_SKILL_BYTES // 4, peak
    assert isinstance(raised, InstallError)
    assert f"entry 'bomb/references/big.md' declares {HUGE} bytes" in raised.message


def test_the_total_of_the_files_is_capped_as_each_is_declared() -> None:
    # Each member alone is fine; together they pass MAX_SKILL_BYTES at the ninth.
    data = tar_gz([(f"bomb/assets/{i}.bin", MIB) for i in range(MAX_SKILL_BYTES // MIB + 4)])

    peak, raised = peak_while(lambda: unpack(data, "many.tar.gz"))

    # At most the files within the cap were held, plus the buffers of the stream.
    assert peak < 1.5 * MAX_SKILL_BYTES, peak
    assert isinstance(raised, InstallError) and "past 8388608 bytes" in raised.message


def test_skipped_members_count_towards_the_uncompressed_cap() -> None:
    # Dot-files are never stored, but decompressing them is work a hostile archive can make huge.
    data = tar_gz([("bomb/.git/pack", HUGE)])

    peak, raised = peak_while(lambda: unpack(data, "dotted.tar.gz"))

    assert peak < MAX_SKILL_BYTES // 4, peak
    assert (
        isinstance(raised, InstallError)
        and f"unpacks to more than {MAX_UNPACKED_BYTES} bytes" in raised.message
    )


def test_a_huge_extended_header_is_cut_at_the_uncompressed_cap() -> None:
    # A pax header is read whole by tarfile itself, before any member reaches our checks: only
    # the cap on the stream under it bounds that read.
    data = tar_gz([("././@PaxHeader", HUGE)], kind=tarfile.XHDTYPE)

    peak, raised = peak_while(lambda: unpack(data, "pax.tar.gz"))

    assert peak < 2 * MAX_UNPACKED_BYTES, peak
    assert isinstance(raised, InstallError) and "unpacks to more than" in raised.message


def test_too_many_members_are_refused_as_they_are_counted() -> None:
    data = tar_gz([(f"bomb/assets/{i}/", 0) for i in range(MAX_ENTRIES + 1)], kind=tarfile.DIRTYPE)

    with pytest.raises(InstallError, match=f"more than {MAX_ENTRIES} entries"):
        unpack(data, "wide.tar.gz")


# ---------------------------------------------------------------- zip


def zipped(members: dict[str, int]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("SKILL.md", SKILL_MD)
        for name, size in members.items():
            with archive.open(name, "w", force_zip64=True) as member:
                for _ in range(size // MIB):
                    member.write(bytes(MIB))
    return buffer.getvalue()


def lying_about(data: bytes, name: str, size: int) -> bytes:
    """`data` with `name`'s declared size set to `size` in the central directory (what zipfile
    reads), its zip64 extra dropped: a member that holds far more than it says."""
    archive = zipfile.ZipFile(io.BytesIO(data))
    info = archive.getinfo(name)
    out = bytearray(data)
    at = archive.start_dir
    while (at := out.find(b"PK\x01\x02", at)) >= 0:
        name_len, extra_len = struct.unpack_from("<HH", out, at + 28)
        if out[at + 46 : at + 46 + name_len] == name.encode():
            # The 32-bit sizes: compressed (the real one) and uncompressed (the lie).
            struct.pack_into("<II", out, at + 20, info.compress_size, size)
            # Zero the zip64 extra's id so its true sizes are not read instead.
            out[at + 46 + name_len : at + 46 + name_len + extra_len] = bytes(extra_len)
            break
        at += 4
    return bytes(out)


def test_a_zip_is_refused_from_its_declared_sizes_before_anything_is_inflated() -> None:
    data = zipped({f"assets/{i}.bin": 3 * MIB for i in range(4)})

    peak, raised = peak_while(lambda: unpack(data, "sum.zip"))

    assert peak < MAX_SKILL_BYTES // 4, peak
    assert isinstance(raised, InstallError) and "past 8388608 bytes" in raised.message


def test_a_zip_member_that_holds_more_than_it_declares_is_cut_while_read() -> None:
    data = lying_about(zipped({"assets/liar.bin": 64 * MIB}), "assets/liar.bin", 1000)
    assert zipfile.ZipFile(io.BytesIO(data)).getinfo("assets/liar.bin").file_size == 1000

    peak, raised = peak_while(lambda: unpack(data, "liar.zip"))

    assert peak < MAX_SKILL_BYTES // 4, peak

    # zipfile stops at the declared size and finds the CRC of the whole does not match
    assert isinstance(raised, InstallError) and "not a .tar.gz or .zip archive" in raised.message


def test_a_well_formed_archive_still_unpacks() -> None:
    files = {"SKILL.md": SKILL_MD, "references/a.md": b"a" * 1000}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, body in files.items():
            archive.writestr(name, body)
    assert unpack(buffer.getvalue(), "ok.zip") == (None, files)
    for compression in ("gz", "bz2", "xz", ""):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode=f"w:{compression}") as tar:
            for name, body in files.items():
                info = tarfile.TarInfo(f"bomb/{name}")
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
        assert unpack(buffer.getvalue(), f"ok.tar.{compression}") == ("bomb", files), compression
