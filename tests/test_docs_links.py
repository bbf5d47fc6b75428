"""Every page of the manual the package's sources, tests and examples name exists, with the section they name."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: a manual page named in a source file (vendor paths such as ``hcomm docs/zh/...`` are the vendor's, not ours)
_REF = re.compile(r"(?<![\w/.])docs/((?!zh/)[\w/.-]+\.md)(#[\w-]+)?")


def _slugs(page: Path) -> set:
    """The anchors MyST makes of a page's headings (``myst_heading_anchors``): lower case, words joined by '-'."""
    out = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower().replace("`", ""))
            out.add(text.replace(" ", "-"))
    return out


def test_named_pages_and_sections_exist():
    missing = []
    for folder in ("hcomm_cffi", "tests", "examples", "scripts", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".c", ".cc", ".h", ".sh") or path.name == Path(__file__).name:
                continue
            for m in _REF.finditer(path.read_text(encoding="utf-8", errors="replace")):
                page = ROOT / "docs" / m.group(1)
                where = f"{path.relative_to(ROOT)} names docs/{m.group(1)}{m.group(2) or ''}"
                if not page.is_file():
                    missing.append(f"{where}: no such page")
                elif m.group(2) and m.group(2)[1:] not in _slugs(page):
                    missing.append(f"{where}: no such section")
    assert not missing, "\n".join(missing)


def test_no_source_cites_a_document_users_do_not_have():
    """The package cites the vendor's sources (repo@commit:file:line) or the manual, never the project's notes."""
    private = re.compile(r"HCOMM_SEMANTICS|HCCL_ABI\.md|seed document")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "hcomm_cffi").rglob("*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if private.search(line)]
    assert not found, "cites a document users do not have: " + ", ".join(found)



def test_the_readme_links_to_pages_that_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = sorted(set(re.findall(r"\]\(((?:docs/)[^)#]+)(?:#[^)]*)?\)", text)))
    assert len(targets) > 10
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to pages that do not exist: {missing}"
