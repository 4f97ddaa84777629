"""A built-in corpus: the Linux man pages of sections 2 and 3 from Debian's `manpages-dev`.

Each page becomes one document:

* title (the retrieval query): the NAME summary after the dash, e.g. open(2) gives
  "open and possibly create a file". The function names before the dash are left out: they
  appear verbatim in the DESCRIPTION, so keeping them would make retrieval a name lookup.
* body: the DESCRIPTION section, one paragraph per line (indentation stripped, runs of spaces
  collapsed, empty lines and table rules dropped). Indented lists, table rows and subsection
  headings stay as lines.
* doc_id: "man2/open" (folder / file name without ".2.gz"); category: "2" or "3".

Pages are rendered with groff (`groff -t -k -man -Tutf8`, plain text, line length 10000n and
hyphenation off, so a paragraph comes out as one line); nothing parses roff source by hand.
Aliases are skipped: symbolic links (Debian turns `.so` links into symlinks) and pages whose
only request is `.so other.page`. Pages without a NAME summary or a DESCRIPTION are skipped and
counted.

Where the pages come from (params `corpus.manpages_root`, default "auto"; `corpus.path` is not
used by this source):

* "auto": the files the installed `manpages-dev` package owns under /usr/share/man (listed with
  `dpkg-query -L`, so pages of other -dev packages in the same folders are not mixed in). When the
  package is not installed (or its man pages were excluded from the install), the .deb is fetched
  without root -- `apt-get download manpages-dev` into data/external/manpages-dev/ -- and unpacked
  there with `dpkg-deb -x`. Both give the same set of pages for one package version.
* any other value: a man root folder holding man2/*.2.gz and man3/*.3.gz; every such page in it
  is read (used by the tests with a small hand-made folder).

`read_manpages` returns the documents and an info dict with the package version used
(`manpages-dev` version from dpkg-query or the .deb, None for an explicit folder) and the counts.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from infocse.errors import StageError

PACKAGE = "manpages-dev"
SYSTEM_ROOT = Path("/usr/share/man")
CACHE = Path("data/external/manpages-dev")
SECTIONS = ("2", "3")
GROFF = ("groff", "-t", "-k", "-man", "-Tutf8", "-P-c", "-P-b", "-P-u", "-rLL=10000n", "-rHY=0")
BOX_DRAWING = frozenset(" " + "".join(map(chr, range(0x2500, 0x2580))))
DASHES = (" - ", " \u2212 ", " \u2010 ", " \u2013 ", " \u2014 ")
INSTALL_HINT = (f"install Debian's {PACKAGE} (apt-get install {PACKAGE}), make `apt-get download {PACKAGE}` "
                "work, or set params `corpus.manpages_root` to a folder with man2/ and man3/")


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, check=False, **kwargs)


# ---------------------------------------------------------------- locating the pages
def page_files(root: Path) -> list[Path]:
    """Every man2/*.2.gz and man3/*.3.gz under a man root, sorted."""
    return sorted(path for section in SECTIONS for path in (root / f"man{section}").glob(f"*.{section}.gz"))


def installed_pages() -> tuple[str, list[Path]] | None:
    """Version and section 2/3 page files of the installed package, if it is installed with its pages."""
    if shutil.which("dpkg-query") is None:
        return None
    status = _run(["dpkg-query", "-W", "-f=${Status}\t${Version}", PACKAGE], text=True)
    if status.returncode != 0 or "\t" not in status.stdout:
        return None
    state, version = status.stdout.split("\t", 1)
    if not state.endswith(" installed"):
        return None
    listing = _run(["dpkg-query", "-L", PACKAGE], text=True)
    files = sorted(Path(line) for line in listing.stdout.splitlines()
                   if any(line.startswith(f"{SYSTEM_ROOT}/man{s}/") and line.endswith(f".{s}.gz") for s in SECTIONS))
    present = [path for path in files if path.exists() or path.is_symlink()]
    if not files or len(present) < len(files):  # e.g. a Docker image whose dpkg excludes /usr/share/man
        return None
    return version.strip(), files


def deb_pages(cache: Path) -> tuple[str, list[Path]]:
    """Version and page files of the .deb, fetched with apt-get download (no root) and unpacked into `cache`."""
    cache.mkdir(parents=True, exist_ok=True)
    debs = sorted(cache.glob(f"{PACKAGE}_*.deb"))
    if not debs:
        if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
            raise StageError(f"{PACKAGE} is not installed and apt-get/dpkg-deb are missing: {INSTALL_HINT}")
        fetched = _run(["apt-get", "download", PACKAGE], cwd=cache, text=True)
        debs = sorted(cache.glob(f"{PACKAGE}_*.deb"))
        if fetched.returncode != 0 or not debs:
            reason = (fetched.stderr.strip().splitlines() or ["no .deb file"])[-1]
            raise StageError(f"{PACKAGE} is not installed and `apt-get download {PACKAGE}` failed ({reason}): {INSTALL_HINT}")
    deb = debs[-1]
    version = _run(["dpkg-deb", "-f", str(deb), "Version"], text=True).stdout.strip() or deb.stem.split("_")[1]
    unpacked = cache / f"{PACKAGE}_{version}"
    if not (unpacked / ".complete").exists():
        shutil.rmtree(unpacked, ignore_errors=True)
        extracted = _run(["dpkg-deb", "-x", str(deb), str(unpacked)], text=True)
        if extracted.returncode != 0:
            raise StageError(f"`dpkg-deb -x {deb}` failed ({' '.join(extracted.stderr.split())[:200]}): {INSTALL_HINT}")
        (unpacked / ".complete").touch()
    files = page_files(unpacked / "usr/share/man")
    if not files:
        raise StageError(f"{deb} holds no section 2/3 man pages: {INSTALL_HINT}")
    return version, files


def locate_manpages(root: str | Path = "auto", cache: Path = CACHE) -> tuple[list[Path], str | None]:
    """The page files to read and the manpages-dev version they come from (None for an explicit folder)."""
    if str(root) != "auto":
        root = Path(root)
        files = page_files(root)
        if not files:
            raise StageError(f"corpus.manpages_root {str(root)!r} has no man2/*.2.gz or man3/*.3.gz pages")
        return files, None
    installed = installed_pages()
    version, files = installed if installed else deb_pages(cache)
    return files, version


def manpages_version(root: str | Path = "auto") -> str | None:
    """The manpages-dev version `read_manpages(root)` reads (None for an explicit folder)."""
    return locate_manpages(root)[1]


# ---------------------------------------------------------------- rendering and sections
def is_alias(path: Path, source: str) -> bool:
    """A symlink, or a page whose only request is `.so other/page` (comments and blank lines aside)."""
    if path.is_symlink():
        return True
    lines = [line.strip() for line in source.splitlines()]
    requests = [line for line in lines if line and not line.startswith(('.\\"', "'\\\"", '.\\#'))]
    return len(requests) == 1 and requests[0].startswith(".so ")


def render(source: str) -> str:
    """Plain text of one man page through groff: no wrapping, no hyphenation, no overstriking."""
    try:
        result = subprocess.run(GROFF, input=source.encode("utf-8"), capture_output=True, check=False,
                                env={**os.environ, "LC_ALL": "C.UTF-8"})
    except FileNotFoundError as error:
        raise StageError("groff is not installed: install it (apt-get install groff) to read man pages") from error
    if result.returncode != 0:
        raise StageError(f"groff failed: {' '.join(result.stderr.decode('utf-8', 'replace').split())[:200]}")
    return result.stdout.decode("utf-8", "replace")


def sections(text: str) -> dict[str, list[str]]:
    """Rendered lines by section: a heading is a non-empty line at column 0 (NAME, DESCRIPTION, ...).
    The running header and footer lines are headings too, so they end the section before them."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line and not line[0].isspace():
            current = found.setdefault(line.strip(), []) if line.strip() not in found else None
        elif current is not None:
            current.append(line)
    return found


def _clean(lines: list[str]) -> list[str]:
    """Strip indentation, collapse runs of spaces, drop empty lines and tbl rules (box-drawing only)."""
    cleaned = (" ".join(line.split()) for line in lines)
    return [line for line in cleaned if line and not all(char in BOX_DRAWING for char in line)]


def page_document(text: str) -> tuple[str | None, str | None]:
    """(title, body) of one rendered page: the NAME summary after the dash, and DESCRIPTION one paragraph per line."""
    parts = sections(text)
    name = " ".join(_clean(parts.get("NAME", [])))
    title = None
    for dash in DASHES:
        if dash in name:
            title = name.split(dash, 1)[1].strip() or None
            break
    body = "\n".join(_clean(parts.get("DESCRIPTION", []))) or None
    return title, body


def _read_one(path: Path) -> tuple[str, str | None, str | None]:
    """('alias' | 'page', title, body) for one page file."""
    try:
        source = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
    except (OSError, EOFError) as error:
        raise StageError(f"{path}: not a readable gzip file ({error})") from error
    if is_alias(path, source):
        return "alias", None, None
    return ("page", *page_document(render(source)))


def read_manpages(root: str | Path = "auto", workers: int = 2, progress: bool = True) -> tuple[pd.DataFrame, dict]:
    """Documents (doc_id, title, body, category; sorted by doc_id) and info: package version and counts."""
    started = time.perf_counter()
    files, version = locate_manpages(root)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(tqdm(pool.map(_read_one, files), total=len(files), desc="man pages",
                            unit="page", disable=not progress))
    rows, counts = [], {"aliases_skipped": 0, "without_name_summary": 0, "without_description": 0}
    for path, (kind, title, body) in zip(files, results):
        if kind == "alias":
            counts["aliases_skipped"] += 1
        elif title is None:
            counts["without_name_summary"] += 1
        elif body is None:
            counts["without_description"] += 1
        else:
            section = path.parent.name.removeprefix("man")
            rows.append({"doc_id": f"man{section}/{path.name.removesuffix(f'.{section}.gz')}", "title": title,
                         "body": body, "category": section})
    documents = pd.DataFrame(rows, columns=["doc_id", "title", "body", "category"])
    documents = documents.sort_values("doc_id", kind="stable").reset_index(drop=True)
    info = {"package": PACKAGE, "version": version, "files": len(files), **counts, "documents": len(documents),
            "seconds": round(time.perf_counter() - started, 1)}
    return documents, info
