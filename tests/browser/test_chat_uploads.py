"""Attaching files on the chat page, in headless Chromium against `sigil dev` and `sigil dev --aws`
(the `site` fixture runs each test on both): a real small PNG chosen with the Attach button, dropped
on the conversation and pasted into the message box reaches the store (the data dir's media folder;
moto's media bucket through a presigned POST and the confirm step) and shows as a thumbnail, before
sending and in the sent message, after a reload too; a file too large is refused from its declared
size before a byte is sent, and one whose bytes are a kind the workspace does not take after the
server has read them; the controls have names and work from the keyboard.
"""

from __future__ import annotations

import base64
from pathlib import Path

import boto3
from playwright.sync_api import BrowserContext, Page, Request, expect

from shared.local.running import running_gateway
from tests.browser.conftest import Site
from tests.browser.test_chat_page import open_page, send
from tests.support import upload_files

PNG = upload_files.png(8, 8)


def stored_bytes(site: Site, media_id: str) -> bytes | None:
    """The file's bytes where the mode's MediaStore keeps them."""
    data_dir = site.gateway.data_dir
    if site.mode == "dev":
        path = data_dir / "media" / "default" / media_id
        return path.read_bytes() if path.is_file() else None
    record = running_gateway(data_dir)
    assert record is not None and record.aws is not None
    s3 = boto3.client(
        "s3",
        endpoint_url=record.aws.endpoint,
        region_name=record.aws.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bucket = record.aws.settings["media_bucket"]
    body: bytes = s3.get_object(Bucket=bucket, Key=f"media/default/{media_id}/bytes")["Body"].read()
    return body


def put_files_js(action: str) -> str:
    """A page function that makes a File from base64 and hands it over as `action` does: a drop on
    the conversation or a paste into the message box (what the browser builds for a real one)."""
    return f"""([name, type, b64]) => {{
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File([bytes], name, {{ type }}));
        {action}
    }}"""


DROP = put_files_js(
    """const zone = document.querySelector('.conversation');
       for (const type of ['dragenter', 'dragover', 'drop']) {
         zone.dispatchEvent(new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));
       }"""
)
PASTE = put_files_js(
    """document.getElementById('message').dispatchEvent(
         new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }));"""
)


def paste_large(page: Page, name: str, size: int) -> None:
    """Paste a PNG-typed file of `size` zero bytes, made in the page (too large to pass over)."""
    page.evaluate(
        """([name, size]) => {
            const dt = new DataTransfer();
            dt.items.add(new File([new Uint8Array(size)], name, { type: 'image/png' }));
            document.getElementById('message').dispatchEvent(
              new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }));
        }""",
        [name, size],
    )


def ready_attachment(page: Page, name: str) -> str:
    item = page.locator(f'#attachments li[data-name="{name}"]')
    expect(item).to_have_attribute("data-state", "ready")
    expect(item.get_by_role("img", name=f"Preview of {name}")).to_be_visible()
    media_id = item.get_attribute("data-media") or ""
    assert media_id.startswith("m-"), media_id
    return media_id


def test_a_png_chosen_with_the_attach_button_reaches_the_store_and_the_page(
    context: BrowserContext, site: Site, tmp_path: Path
) -> None:
    page = open_page(context, site, "alice.photo")
    photo = tmp_path / "plant.png"
    photo.write_bytes(PNG)
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach").click()
    chooser.value.set_files(str(photo))
    media_id = ready_attachment(page, "plant.png")
    assert stored_bytes(site, media_id) == PNG

    send(page, "what is this plant?")
    mine = page.locator(".msg.user")
    thumb = mine.get_by_role("img", name="plant.png")
    expect(thumb).to_be_visible()
    assert thumb.get_attribute("data-media") == media_id
    # Drawn from the file: a real image the browser decoded, not a broken one.
    assert thumb.evaluate("img => img.complete && img.naturalWidth > 0")
    # The fake model echoes the message as it was sent to it: the caption, with whatever the turn
    # made of the photo for the model (docs/media.md), so the caption is in the reply.
    expect(page.locator(".msg.assistant[data-seq]")).to_contain_text("what is this plant?")
    expect(page.locator("#attachments")).to_be_hidden()

    page.reload()
    expect(page.locator(".msg.assistant[data-seq]")).to_contain_text("what is this plant?")
    expect(page.locator(".msg.user").get_by_role("img", name="plant.png")).to_be_visible()


def test_a_dropped_file_and_a_pasted_image_are_attached(context: BrowserContext, site: Site) -> None:
    page = open_page(context, site, "alice.dropped")
    b64 = base64.b64encode(PNG).decode()
    page.evaluate(DROP, ["dropped.png", "image/png", b64])
    dropped = ready_attachment(page, "dropped.png")
    page.evaluate(PASTE, ["pasted.png", "image/png", b64])
    pasted = ready_attachment(page, "pasted.png")
    assert dropped != pasted
    assert stored_bytes(site, dropped) == PNG and stored_bytes(site, pasted) == PNG
    # A PDF is a chip, not a thumbnail.
    pdf = base64.b64encode(upload_files.pdf()).decode()
    page.evaluate(DROP, ["report.pdf", "application/pdf", pdf])
    chip = page.locator('#attachments li[data-name="report.pdf"]')
    expect(chip).to_have_attribute("data-state", "ready")
    expect(chip.locator(".chip")).to_contain_text("report.pdf")
    send(page, "three files")
    mine = page.locator(".msg.user")
    expect(mine.locator("img.thumb")).to_have_count(2)
    expect(mine.locator(".chip")).to_contain_text("report.pdf")
    expect(page.locator(".msg.assistant[data-seq]")).to_contain_text("three files")


def test_a_file_too_large_is_refused_before_a_byte_is_sent(context: BrowserContext, site: Site) -> None:
    page = open_page(context, site, "alice.big")
    posts: list[str] = []

    def note(request: Request) -> None:
        if request.method == "POST":
            posts.append(request.url)

    page.on("request", note)
    # 11 MB of "PNG" (the workspace takes images up to 10 MB): refused by the slot, from its size.
    paste_large(page, "big.png", 11_000_000)
    item = page.locator('#attachments li[data-name="big.png"]')
    expect(item).to_have_attribute("data-state", "refused")
    expect(item.get_by_role("alert")).to_have_text(
        "Not attached: big.png is too large: 11 MB, and an image file may be at most 10 MB"
    )
    # Only the slot was asked: no bytes went to the gateway or the bucket.
    assert [u for u in posts if "/uploads" not in u or "/uploads/" in u] == []
    page.get_by_role("button", name="Remove big.png").click()
    expect(item).to_have_count(0)


def test_a_kind_the_workspace_does_not_take_is_refused_after_the_upload(
    context: BrowserContext, site: Site
) -> None:
    page = open_page(context, site, "alice.zip")
    # Called a PNG, but the bytes are a zip archive: the server sniffs them and refuses the kind.
    zipped = base64.b64encode(upload_files.zip_archive()).decode()
    page.evaluate(DROP, ["holiday.png", "image/png", zipped])
    item = page.locator('#attachments li[data-name="holiday.png"]')
    expect(item).to_have_attribute("data-state", "refused")
    expect(item.get_by_role("alert")).to_have_text(
        "Not attached: holiday.png: this workspace does not take other files"
    )
    # A refused file is not sent: the message goes with its text only.
    send(page, "no files here")
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text("no files here")
    assert page.locator(".msg.user .files").count() == 0


def test_the_attach_controls_are_named_and_work_from_the_keyboard(
    context: BrowserContext, site: Site, tmp_path: Path
) -> None:
    page = open_page(context, site, "alice.keys")
    attach = page.get_by_role("button", name="Attach")
    expect(attach).to_be_visible()
    # Shift+Tab from the message box reaches Attach; Enter opens the file chooser.
    page.get_by_role("textbox", name="Message").focus()
    page.keyboard.press("Shift+Tab")
    expect(attach).to_be_focused()
    photo = tmp_path / "keys.png"
    photo.write_bytes(PNG)
    with page.expect_file_chooser() as chooser:
        attach.press("Enter")
    chooser.value.set_files(str(photo))
    ready_attachment(page, "keys.png")
    expect(page.get_by_role("list", name="Files to send")).to_be_visible()
    remove = page.get_by_role("button", name="Remove keys.png")
    remove.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#attachments li")).to_have_count(0)
    expect(page.get_by_role("textbox", name="Message")).to_be_focused()
