"""manpages (infocse/corpora/manpages.py): the built-in man-page corpus, rendered by the real groff.

A hand-made man root in a tmp folder checks titles, one-line paragraphs, section boundaries and the
skipped pages; a hand-built .deb checks the unpack path; the installed manpages-dev pages check the
real corpus; prepare_corpus runs with `source: manpages`."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest
from test_prepare import config_for

from infocse.corpora.build import prepare_corpus
from infocse.corpora.manpages import deb_pages, installed_pages, locate_manpages, read_manpages, render
from infocse.errors import StageError

PARAGRAPH_1 = ("foo() does a foo thing with the argument x, which must point to an internationalization table "
               "of incomprehensibilities that was set up earlier by a call to foo_init(). The table is read but "
               "never changed, so several threads may call foo() at the same time without any locking at all.")
PARAGRAPH_2 = ("If x is NULL, foo() falls back to the default table of the calling process, which is rebuilt "
               "whenever the environment variable FOO_TABLE changes. Characteristically uncharacteristic "
               "counterrevolutionaries are handled like any other entry of the table.")
FOO = r""".TH FOO 2 2024-01-01 "Test 1.0" "Test Programmer's Manual"
.SH NAME
foo \- do a foo thing
.SH SYNOPSIS
.nf
.B #include <foo.h>
.PP
.BI "int foo(const struct foo_table *" x );
.fi
.SH DESCRIPTION
.BR foo ()
does a foo thing with the argument
.IR x ,
which must point to an internationalization table of incomprehensibilities
that was set up earlier by a call to
.BR foo_init ().
The table is read but never changed,
so several threads may call
.BR foo ()
at the same time without any locking at all.
.PP
If
.I x
is NULL,
.BR foo ()
falls back to the default table of the calling process,
which is rebuilt whenever the environment variable
.B FOO_TABLE
changes.
Characteristically uncharacteristic counterrevolutionaries
are handled like any other entry of the table.
.SH RETURN VALUE
On success, zero is returned.
On error, \-1 is returned and the return value is unrelated.
"""
QUX = r""".TH QUX 3 2024-01-01 "Test 1.0" "Test Programmer's Manual"
.SH NAME
qux, quux \- convert a qux to a quux
.SH DESCRIPTION
.BR qux ()
converts a qux.
It never fails.
.SH SEE ALSO
.BR foo (2)
"""
NO_DESCRIPTION = r""".TH NODESC 3 2024-01-01 "Test 1.0" "Test Programmer's Manual"
.SH NAME
nodesc \- a page without a description
.SH SYNOPSIS
.B void nodesc(void);
"""
NO_SUMMARY = r""".TH NOSUM 3 2024-01-01 "Test 1.0" "Test Programmer's Manual"
.SH NAME
nosum
.SH DESCRIPTION
A description that has no NAME summary to go with it.
"""
SO_ALIAS = '.\\" an alias page, as upstream man-pages ships them\n.so man2/foo.2\n'


def write_page(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(source.encode("utf-8")))
    return path


@pytest.fixture
def man_root(tmp_path) -> Path:
    """man2: foo (a page), bar (a .so alias), baz (a symlink alias); man3: qux (a page), nodesc (no
    DESCRIPTION), nosum (no NAME summary), and a .3pm page the reader does not take."""
    root = tmp_path / "man"
    write_page(root / "man2" / "foo.2.gz", FOO)
    write_page(root / "man2" / "bar.2.gz", SO_ALIAS)
    (root / "man2" / "baz.2.gz").symlink_to("foo.2.gz")
    write_page(root / "man3" / "qux.3.gz", QUX)
    write_page(root / "man3" / "nodesc.3.gz", NO_DESCRIPTION)
    write_page(root / "man3" / "nosum.3.gz", NO_SUMMARY)
    write_page(root / "man3" / "Other.3pm.gz", QUX)
    return root


def test_groff_would_wrap_the_test_page():
    """The check below means something: groff's usual rendering hard-wraps the first paragraph."""
    plain = subprocess.run(["groff", "-man", "-Tutf8", "-P-c", "-P-b", "-P-u"], input=FOO.encode(),
                           capture_output=True, check=True).stdout.decode()
    lines = [" ".join(line.split()) for line in plain.splitlines()]
    assert any(line.startswith("foo() does a foo thing") for line in lines)
    assert PARAGRAPH_1 not in lines and PARAGRAPH_2 not in lines
    rendered = [" ".join(line.split()) for line in render(FOO).splitlines()]
    assert PARAGRAPH_1 in rendered and PARAGRAPH_2 in rendered


def test_read_manpages_folder(man_root):
    """Titles are the NAME summaries; bodies are DESCRIPTION only, one unwrapped, unhyphenated line per
    paragraph; aliases, a page without DESCRIPTION and one without a summary are skipped and counted."""
    documents, info = read_manpages(man_root, progress=False)
    assert list(documents.columns) == ["doc_id", "title", "body", "category"]
    assert documents["doc_id"].tolist() == ["man2/foo", "man3/qux"]
    assert documents["category"].tolist() == ["2", "3"]
    assert documents["title"].tolist() == ["do a foo thing", "convert a qux to a quux"]
    foo = documents.loc[0, "body"]
    assert foo == f"{PARAGRAPH_1}\n{PARAGRAPH_2}"
    assert "SYNOPSIS" not in foo and "#include" not in foo and "zero is returned" not in foo
    assert documents.loc[1, "body"] == "qux() converts a qux. It never fails."
    assert info == {"package": "manpages-dev", "version": None, "files": 6, "aliases_skipped": 2,
                    "without_name_summary": 1, "without_description": 1, "documents": 2,
                    "seconds": info["seconds"]}


def test_read_manpages_is_deterministic(man_root):
    """Two reads (any number of workers) give the same table."""
    first, _ = read_manpages(man_root, workers=2, progress=False)
    again, _ = read_manpages(man_root, workers=1, progress=False)
    assert first.equals(again)


def test_locate_folder_without_pages(tmp_path):
    """A man root without man2/man3 pages is a one-line StageError naming the folder."""
    (tmp_path / "man2").mkdir()
    with pytest.raises(StageError, match=r"has no man2/\*\.2\.gz or man3/\*\.3\.gz pages"):
        locate_manpages(tmp_path)


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_deb_pages_unpacks_a_cached_deb(tmp_path, man_root):
    """Without the package installed: a .deb in the cache folder is unpacked once, its version recorded."""
    package = tmp_path / "pkg"
    (package / "DEBIAN").mkdir(parents=True)
    (package / "DEBIAN" / "control").write_text(
        "Package: manpages-dev\nVersion: 9.99-1\nArchitecture: all\nMaintainer: Test <test@example.org>\n"
        "Description: test pages\n", encoding="utf-8")
    shutil.copytree(man_root, package / "usr" / "share" / "man", symlinks=True)
    cache = tmp_path / "cache"
    cache.mkdir()
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(package), str(cache / "manpages-dev_9.99-1_all.deb")],
                   capture_output=True, check=True)
    version, files = deb_pages(cache)
    assert version == "9.99-1"
    assert [f"{path.parent.name}/{path.name}" for path in files] == [
        "man2/bar.2.gz", "man2/baz.2.gz", "man2/foo.2.gz", "man3/nodesc.3.gz", "man3/nosum.3.gz", "man3/qux.3.gz"]
    assert files[1].is_symlink() and (cache / "manpages-dev_9.99-1" / ".complete").exists()
    assert deb_pages(cache) == (version, files)  # the second call reuses the unpacked folder
    documents, _ = read_manpages(files[0].parents[1], progress=False)
    assert documents["doc_id"].tolist() == ["man2/foo", "man3/qux"]


def test_prepare_corpus_manpages(man_root):
    """`source: manpages` with `manpages_root`: documents, sentences from DESCRIPTION, splits by section."""
    documents, sentences, stats = prepare_corpus(config_for("manpages", "ignored", manpages_root=str(man_root)))
    assert documents["doc_id"].tolist() == ["man2/foo", "man3/qux"]
    assert documents["title"].tolist() == ["do a foo thing", "convert a qux to a quux"]
    assert set(documents["split"]) <= {"fewshot", "val", "test"}
    foo = sentences.loc[sentences["doc_id"] == "man2/foo", "text"].tolist()
    assert foo == [PARAGRAPH_1[:PARAGRAPH_1.index(" The table")], PARAGRAPH_1[PARAGRAPH_1.index("The table"):],
                   PARAGRAPH_2[:PARAGRAPH_2.index(" Characteristically")],
                   PARAGRAPH_2[PARAGRAPH_2.index("Characteristically"):]]
    assert sentences.loc[sentences["doc_id"] == "man3/qux", "text"].tolist() == ["qux() converts a qux.", "It never fails."]
    assert stats["documents"] == 2 and stats["documents_with_title"] == 2 and stats["duplicate_bodies_dropped"] == 0


def test_unknown_source_lists_manpages(tmp_path):
    with pytest.raises(StageError, match=r"`corpus.source` must be one of \[.*'manpages'.*\], got 'manpage'"):
        config_for("manpage", tmp_path)


@pytest.mark.skipif(installed_pages() is None, reason="Debian's manpages-dev is not installed with its pages")
def test_read_installed_manpages():
    """The real corpus: the installed package's section 2/3 pages (other packages' pages left out)."""
    documents, info = read_manpages("auto", progress=False)
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "manpages-dev"], capture_output=True,
                             text=True, check=True).stdout
    assert info["version"] == version and info["documents"] == len(documents)
    assert len(documents) >= 800  # 852 for 6.03-2: 2165 files, 1311 of them alias symlinks
    assert documents["doc_id"].is_unique and documents["doc_id"].is_monotonic_increasing
    assert set(documents["category"]) == {"2", "3"}
    assert (documents["title"].str.strip() != "").all() and (documents["body"].str.strip() != "").all()
    pages = documents.set_index("doc_id")
    assert pages.loc["man2/open", "title"] == "open and possibly create a file"
    assert pages.loc["man3/printf", "title"] == "formatted output conversion"
    assert pages.loc["man2/open", "body"].startswith("The open() system call opens the file specified by pathname.")
    assert "\n\n" not in pages.loc["man2/open", "body"]
    assert not documents["doc_id"].str.startswith("man3/DPMS").any()  # libxext-dev's pages are not taken
