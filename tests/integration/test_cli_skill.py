"""`sigil skill` through typer's CliRunner on both backends (the embedded data dir; S3 on moto with
SIGIL_BACKEND=aws, as an admin's shell would): install, copy, link with an edit that propagates,
remove, validate against the agentskills.io rules, and installs from a well-known index served
over HTTP by the test (a bad digest, a traversal archive and a name mismatch refused)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.cli import app
from shared.cli.skill import skill_settings, skill_store
from shared.ports import SkillStore
from shared.skills import available_skills
from tests.support import moto_aws
from tests.support.served import Served

runner = CliRunner()


def skill_md(name: str, description: str = "A skill.", body: str = "Body.", extra: str = "") -> str:
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}\n"


@dataclass
class Admin:
    data_dir: Path
    tmp: Path

    def sigil(self, *args: str) -> tuple[int, str]:
        result = runner.invoke(app, [*args, "--data-dir", str(self.data_dir)])
        return result.exit_code, result.stdout + result.stderr

    @property
    def store(self) -> SkillStore:
        return skill_store(skill_settings(self.data_dir))

    def folder(self, name: str, text: str, files: dict[str, str] | None = None) -> Path:
        folder = self.tmp / "src" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SKILL.md").write_text(text)
        for path, body in (files or {}).items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(body)
        return folder


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "SIGIL_DATA_DIR",
        "SIGIL_DEFAULT_WORKSPACE",
        "SIGIL_BACKEND",
        "SIGIL_SKILLS_BUCKET",
        "SIGIL_SKILL_INDEX",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=["embedded", "aws"])
def admin(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Admin]:
    if request.param == "embedded":
        yield Admin(tmp_path / "state", tmp_path)
        return
    with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
        resources = moto_aws.provision(moto_aws.name_for(tmp_path))
        monkeypatch.setenv("SIGIL_BACKEND", "aws")
        monkeypatch.setenv("SIGIL_SKILLS_BUCKET", resources.skills_bucket)
        # The stack's tables too: a workspace with no skills is known by its configuration or
        # sessions there (require_known_workspace). The search endpoint is never contacted.
        settings = resources.settings(embedding_model="none", opensearch_endpoint="search.invalid")
        for field in ("sessions_table", "memory_table", "queue_url", "event_bus_name", "opensearch_endpoint"):
            monkeypatch.setenv(f"SIGIL_{field.upper()}", str(getattr(settings, field)))
        monkeypatch.setenv("AWS_REGION", moto_aws.REGION)
        yield Admin(tmp_path / "state", tmp_path)


def test_install_copy_link_edit_and_remove(admin: Admin) -> None:
    src = admin.folder(
        "deploy-notes", skill_md("deploy-notes", "Deploy notes v1."), {"references/how.md": "how"}
    )
    assert admin.sigil("skill", "install", str(src), "-w", "ops")[0] == 0
    code, out = admin.sigil("skill", "list", "-w", "ops")
    assert code == 0 and "deploy-notes  [auto]  Deploy notes v1." in out
    # Installing again needs --force
    code, out = admin.sigil("skill", "install", str(src), "-w", "ops")
    assert code == 1 and "--force" in out
    assert admin.sigil("skill", "copy", "deploy-notes", "--from", "ops", "--to", "home")[0] == 0
    code, out = admin.sigil("skill", "link", "deploy-notes", "--from", "ops", "--to", "team")
    assert code == 0 and "linked team/deploy-notes to ops/deploy-notes" in out
    # When the source is edited and installed again
    (src / "SKILL.md").write_text(skill_md("deploy-notes", "Deploy notes v2."))
    (src / "references" / "how.md").unlink()
    assert admin.sigil("skill", "install", str(src), "-w", "ops", "--force")[0] == 0
    # Then the link reads the edit and the copy keeps its own
    code, out = admin.sigil("skill", "list", "-w", "team")
    assert "deploy-notes  [auto]  (link to ops/deploy-notes)  Deploy notes v2." in out
    assert [s.description for s in available_skills(admin.store, "home")] == ["Deploy notes v1."]
    assert admin.store.read_file("home", "deploy-notes", "references/how.md") == b"how"
    assert admin.store.read_file("ops", "deploy-notes", "references/how.md") is None
    # A linked-to skill is kept until its links go
    code, out = admin.sigil("skill", "remove", "deploy-notes", "-w", "ops")
    assert code == 1 and "linked from team/deploy-notes" in out
    assert admin.sigil("skill", "remove", "deploy-notes", "-w", "team")[0] == 0
    assert admin.sigil("skill", "remove", "deploy-notes", "-w", "ops")[0] == 0
    assert admin.store.list_skills("ops") == [] and admin.store.list_skills("team") == []
    # ops holds nothing now, and nothing configures it: a workspace the target does not know
    code, out = admin.sigil("skill", "remove", "deploy-notes", "-w", "ops")
    assert code == 2 and "no workspace 'ops'; the known ones are: default" in " ".join(
        out.replace("│", " ").split()
    )


@pytest.mark.parametrize(
    ("folder", "text", "problem"),
    [
        ("other", skill_md("not-other"), "SKILL.md:2: name 'not-other' differs from its folder 'other'"),
        ("a--b", skill_md("a--b"), "SKILL.md:2: name 'a--b' is not lowercase"),
        ("-lead", skill_md("-lead"), "SKILL.md:2: name '-lead' is not lowercase"),
        ("trail-", skill_md("trail-"), "SKILL.md:2: name 'trail-' is not lowercase"),
        ("Upper", skill_md("Upper"), "SKILL.md:2: name 'Upper' is not lowercase"),
        ("empty-desc", skill_md("empty-desc", '""'), "SKILL.md:3: description is required"),
        ("x" * 65, skill_md("x" * 65), "must be 1-64 characters"),
        ("long", skill_md("long", "d" * 1025), "SKILL.md:3: description is 1025 characters (at most 1024)"),
        ("compat", skill_md("compat", extra=f"compatibility: {'c' * 501}\n"), "SKILL.md:4: compatibility"),
        ("tags", skill_md("tags", extra="tags: a\n"), "SKILL.md:4: 'tags' is not a SKILL.md field"),
        ("nodesc", "---\nname: nodesc\n---\nx\n", "description is required"),
    ],
)
def test_validate_refuses_what_the_specification_refuses(
    admin: Admin, folder: str, text: str, problem: str
) -> None:
    path = admin.folder(folder, text)
    code, out = admin.sigil("skill", "validate", str(path))
    assert code == 1 and problem in out and str(path) in out
    code, out = admin.sigil("skill", "install", str(path), "-w", "ops")
    assert code == 1 and problem in out
    assert admin.store.list_skills("ops") == []


def test_validate_of_a_missing_path_says_so_rather_than_judging_it_as_a_name(admin: Admin) -> None:
    code, out = admin.sigil("skill", "validate", "./no-such-skill")
    assert (code, out.strip()) == (1, "./no-such-skill: no such folder")
    code, out = admin.sigil("skill", "validate", "skills/Deploy")
    assert (code, out.strip()) == (1, "skills/Deploy: no such folder")
    # A name a skill could have is still looked up among the installed ones
    code, out = admin.sigil("skill", "validate", "nosuch")
    assert code == 1 and "nosuch: neither a folder nor a skill installed in default" in out


def test_validate_takes_a_skill_md_path_as_its_folder(admin: Admin) -> None:
    path = admin.folder("tags", skill_md("tags", extra="tags: [a, b]\n"))
    code, out = admin.sigil("skill", "validate", str(path / "SKILL.md"))
    assert code == 1 and "SKILL.md:4: 'tags': a list ([...]) is not a SKILL.md value" in out


def test_validate_accepts_the_full_format_and_an_installed_skill(admin: Admin) -> None:
    text = skill_md(
        "full",
        extra="license: MIT\ncompatibility: Needs git\nallowed-tools: Bash(git:*)\n"
        "metadata:\n  gateway:trigger: keyword\n  gateway:keywords: deploy\n",
    )
    path = admin.folder("full", text, {"scripts/run.sh": "echo", "references/r.md": "r", "assets/a.txt": "a"})
    code, out = admin.sigil("skill", "validate", str(path))
    assert code == 0 and "ok: full [keyword]" in out
    admin.sigil("skill", "install", str(path), "-w", "ops")
    code, out = admin.sigil("skill", "validate", "full", "-w", "ops")
    assert code == 0 and "ok: full" in out


# ---------------------------------------------------------------- a well-known index over HTTP


class Files(Served):
    """Serves a dict of path -> bytes over HTTP on a free local port."""

    def __init__(self, files: dict[str, bytes], redirects: dict[str, str] | None = None) -> None:
        served = files
        moved = redirects or {}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path in moved:
                    self.send_response(302)
                    self.send_header("Location", moved[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = served.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def tar_gz(entries: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, body in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return buffer.getvalue()


def zipped(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, body in entries.items():
            archive.writestr(name, body)
    return buffer.getvalue()


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


ARTIFACTS = {
    "/skills/pdf/SKILL.md": skill_md("pdf", "Reading and filling PDF forms.").encode(),
    "/skills/k8s.tar.gz": tar_gz(
        {
            "k8s/SKILL.md": skill_md("k8s", "Kubernetes troubleshooting.").encode(),
            "k8s/references/pods.md": b"pods",
        }
    ),
    "/skills/notes.zip": zipped(
        {"SKILL.md": skill_md("notes", "Meeting notes.").encode(), "assets/t.md": b"t"}
    ),
    "/skills/escape.tar.gz": tar_gz(
        {"escape/SKILL.md": skill_md("escape").encode(), "escape/../../evil": b"x"}
    ),
    "/skills/linky.tar.gz": tar_gz(
        {"linky/SKILL.md": skill_md("linky").encode()}, links={"linky/x": "/etc/passwd"}
    ),
    "/skills/impostor/SKILL.md": skill_md("someone-else").encode(),
    "/skills/tampered/SKILL.md": skill_md("tampered").encode(),
}


def entry(name: str, kind: str, url: str, description: str = "", good: bool = True) -> dict[str, str]:
    data = ARTIFACTS[f"/skills/{url}"]
    return {
        "name": name,
        "type": kind,
        "description": description,
        "url": url,
        "digest": digest(data if good else data + b"changed"),
    }


INDEX = {
    "$schema": "https://agentskills.io/schemas/discovery/0.2.0.json",
    "skills": [
        entry("pdf", "skill-md", "pdf/SKILL.md", "Reading and filling PDF forms."),
        entry("k8s", "archive", "k8s.tar.gz", "Kubernetes troubleshooting."),
        entry("notes", "archive", "notes.zip", "Meeting notes."),
        entry("escape", "archive", "escape.tar.gz"),
        entry("linky", "archive", "linky.tar.gz"),
        entry("impostor", "skill-md", "impostor/SKILL.md"),
        entry("tampered", "skill-md", "tampered/SKILL.md", good=False),
    ],
}


@pytest.fixture
def index_url() -> Iterator[str]:
    # The index sits at /.well-known/agent-skills/; its urls are relative to it, so the artifacts
    # are served from /.well-known/agent-skills/skills/... as well as under /skills/.
    files = {"/.well-known/agent-skills/index.json": json.dumps(INDEX).encode()}
    for path, body in ARTIFACTS.items():
        files[f"/.well-known/agent-skills{path.removeprefix('/skills')}"] = body
    with Files(files) as server:
        yield f"{server.origin}/.well-known/agent-skills/index.json"


# The test's server speaks plain http, which every command refuses unless told (the next section).
HTTP = "--allow-http"


def test_an_index_install_verifies_digests_and_names(admin: Admin, index_url: str) -> None:
    code, out = admin.sigil(
        "skill", "install", index_url, "-w", "ops", "--skill", "pdf", "--skill", "k8s", HTTP
    )
    assert code == 0, out
    code, out = admin.sigil("skill", "install", index_url, "-w", "ops", "--skill", "notes", HTTP)
    assert code == 0, out
    assert admin.store.list_skills("ops") == ["k8s", "notes", "pdf"]
    assert admin.store.read_file("ops", "k8s", "references/pods.md") == b"pods"
    assert admin.store.list_files("ops", "notes") == ["SKILL.md", "assets/t.md"]
    refusals = {
        "tampered": "sha256 is",
        "escape": "escapes the skill's folder",
        "linky": "is a link or special file",
        "impostor": "differs from its folder",
    }
    for name, problem in refusals.items():
        code, out = admin.sigil("skill", "install", index_url, "-w", "ops", "--skill", name, HTTP)
        assert code == 1 and problem in out, (name, out)
    # One refused artifact installs none of the batch
    code, out = admin.sigil(
        "skill", "install", index_url, "-w", "fresh", "--skill", "pdf", "--skill", "tampered", HTTP
    )
    assert code == 1 and admin.store.list_skills("fresh") == []
    assert admin.store.list_skills("ops") == ["k8s", "notes", "pdf"]
    code, out = admin.sigil("skill", "install", index_url, "-w", "ops", HTTP)
    assert code == 1 and "name them with --skill NAME" in out and "pdf" in out


def test_search_matches_names_and_descriptions(index_url: str) -> None:
    result = runner.invoke(app, ["skill", "search", "pdf forms", "--index", index_url, HTTP])
    assert result.exit_code == 0 and result.stdout.splitlines() == [
        "pdf  [skill-md]  Reading and filling PDF forms."
    ]
    result = runner.invoke(app, ["skill", "search", "KUBERNETES", "--index", index_url, HTTP])
    assert result.stdout.splitlines() == ["k8s  [archive]  Kubernetes troubleshooting."]
    result = runner.invoke(app, ["skill", "search", "nothing-like-it", "--index", index_url, HTTP])
    assert result.exit_code == 0 and "no skill" in result.stdout


def test_search_takes_a_hosts_well_known_index_and_a_default_one(
    index_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = index_url.removesuffix("/.well-known/agent-skills/index.json")
    # A bare origin stands for its well-known index
    result = runner.invoke(app, ["skill", "search", "kubernetes", "--index", origin, HTTP])
    assert result.stdout.splitlines() == ["k8s  [archive]  Kubernetes troubleshooting."]
    # With no --index, as spec 000 writes it (`sigil skill search "kubernetes"`): SIGIL_SKILL_INDEX's
    result = runner.invoke(app, ["skill", "search", "kubernetes", HTTP])
    assert result.exit_code == 1 and "pass --index https://host" in result.stderr
    monkeypatch.setenv("SIGIL_SKILL_INDEX", f"{origin}/")
    result = runner.invoke(app, ["skill", "search", "kubernetes", HTTP])
    assert result.exit_code == 0 and result.stdout.splitlines() == [
        "k8s  [archive]  Kubernetes troubleshooting."
    ]


def test_install_from_a_hosts_origin_reads_its_well_known_index(admin: Admin, index_url: str) -> None:
    origin = index_url.removesuffix("/.well-known/agent-skills/index.json")
    code, out = admin.sigil("skill", "install", origin, "-w", "ops", "--skill", "pdf", HTTP)
    assert code == 0, out
    assert admin.store.list_skills("ops") == ["pdf"]


def test_install_from_a_skill_md_url_an_archive_url_and_an_archive_file(admin: Admin, index_url: str) -> None:
    base = index_url.removesuffix("index.json")
    pdf = ARTIFACTS["/skills/pdf/SKILL.md"]
    code, out = admin.sigil(
        "skill", "install", f"{base}pdf/SKILL.md", "-w", "ops", "--sha256", sha(pdf), HTTP
    )
    assert code == 0 and "installed pdf in ops (1 files)" in out
    code, out = admin.sigil("skill", "install", f"{base}k8s.tar.gz", "-w", "ops", "--no-digest", HTTP)
    assert code == 0 and "installed k8s in ops (2 files)" in out
    archive = admin.tmp / "notes.zip"
    archive.write_bytes(ARTIFACTS["/skills/notes.zip"])
    assert admin.sigil("skill", "install", str(archive), "-w", "ops")[0] == 0
    assert admin.store.list_skills("ops") == ["k8s", "notes", "pdf"]
    code, out = admin.sigil("skill", "install", f"{base}escape.tar.gz", "-w", "ops", "--no-digest", HTTP)
    assert code == 1 and "escapes the skill's folder" in out
    code, out = admin.sigil("skill", "install", f"{base}nothing.txt", "-w", "ops", HTTP)
    assert code == 1 and "give a SKILL.md's URL" in out
    code, out = admin.sigil("skill", "install", f"{base}missing.zip", "-w", "ops", "--no-digest", HTTP)
    assert code == 1 and "can't be fetched" in out
    assert admin.store.list_skills("ops") == ["k8s", "notes", "pdf"]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- plain http and unchecked URLs


def test_plain_http_is_refused_unless_the_operator_allows_it(admin: Admin, index_url: str) -> None:
    origin = index_url.removesuffix("/.well-known/agent-skills/index.json")
    base = index_url.removesuffix("index.json")
    pdf = ARTIFACTS["/skills/pdf/SKILL.md"]
    # An index, by its URL or its host's, a search, and a file's own URL even with its sha256
    attempts = [
        ("skill", "install", index_url, "-w", "ops", "--skill", "pdf"),
        ("skill", "install", origin, "-w", "ops", "--all"),
        ("skill", "install", f"{base}pdf/SKILL.md", "-w", "ops", "--sha256", sha(pdf)),
    ]
    for args in attempts:
        code, out = admin.sigil(*args)
        assert code == 1 and "plain http" in out and "--allow-http" in out, (args, out)
    result = runner.invoke(app, ["skill", "search", "pdf", "--index", index_url])
    assert result.exit_code == 1 and "plain http" in result.stderr and "--allow-http" in result.stderr
    assert admin.store.list_skills("ops") == []


def test_a_files_own_url_needs_its_sha256_or_an_explicit_no_digest(admin: Admin, index_url: str) -> None:
    base = index_url.removesuffix("index.json")
    k8s = ARTIFACTS["/skills/k8s.tar.gz"]
    url = f"{base}k8s.tar.gz"
    # No digest said: refused before anything is fetched or stored, saying what to pass
    code, out = admin.sigil("skill", "install", url, "-w", "ops", HTTP)
    assert code == 1 and "--sha256" in out and "--no-digest" in out
    # A wrong one: refused, naming both
    wrong = sha(k8s + b"x")
    code, out = admin.sigil("skill", "install", url, "-w", "ops", "--sha256", wrong, HTTP)
    assert code == 1 and f"sha256 is {sha(k8s)}, --sha256 says {wrong}" in out
    code, out = admin.sigil("skill", "install", url, "-w", "ops", "--sha256", "abc", HTTP)
    assert code == 1 and "64 hex digits" in out
    code, out = admin.sigil("skill", "install", url, "-w", "ops", "--sha256", sha(k8s), "--no-digest", HTTP)
    assert code == 1 and "not both" in out
    assert admin.store.list_skills("ops") == []
    # The right one, as `sha256sum` prints it or as an index writes it (any case)
    code, out = admin.sigil(
        "skill", "install", url, "-w", "ops", "--sha256", f"SHA256:{sha(k8s).upper()}", HTTP
    )
    assert code == 0 and "installed k8s in ops" in out
    # A local file may be checked the same way; a folder or an index may not
    archive = admin.tmp / "k8s.tar.gz"
    archive.write_bytes(k8s)
    code, out = admin.sigil("skill", "install", str(archive), "-w", "ops", "--force", "--sha256", wrong)
    assert code == 1 and "--sha256 says" in out
    code, out = admin.sigil(
        "skill", "install", index_url, "-w", "ops", "--skill", "k8s", "--sha256", wrong, HTTP
    )
    assert code == 1 and "--sha256 checks one file" in out


def test_a_redirect_may_not_leave_for_another_scheme(admin: Admin) -> None:
    # urllib alone follows a redirect to ftp:// (or from https to http); the install does not.
    with Files({}, redirects={"/k8s.tar.gz": "ftp://files.invalid/k8s.tar.gz"}) as server:
        code, out = admin.sigil(
            "skill", "install", f"{server.origin}/k8s.tar.gz", "-w", "ops", "--no-digest", HTTP
        )
    assert code == 1 and "ftp://files.invalid/k8s.tar.gz: only https" in out
    assert admin.store.list_skills("ops") == []


def test_the_aws_backend_without_a_bucket_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIGIL_BACKEND", "aws")
    result = runner.invoke(app, ["skill", "list", "-w", "ops", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1 and "SIGIL_SKILLS_BUCKET" in result.stderr
