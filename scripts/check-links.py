#!/usr/bin/env python3
"""Checks the links of the docs: every relative link and #anchor in README.md,
ARCHITECTURE.md, CONTRIBUTING.md and docs/src/**/*.md resolves.

- A link's file must exist; a `#anchor` must name a heading of the page it points to
  (GitHub's and mdBook's ids: lower case, punctuation dropped, spaces become `-`, a repeated
  heading gets `-1`, `-2`, ...).
- A page of the book (docs/src) may link only inside docs/src, and a link to another page
  must name a chapter of docs/src/SUMMARY.md (and not a README.md, which mdBook renames):
  anything else is a broken link in the built book. `{{#include F}}` must name an existing file.

With `--built DIR` (the book's HTML output, after `mdbook build docs`), checks instead that
every relative `href`/`src` of the rendered pages' content names a file of DIR, and every
`#anchor` an id of the page it points to.

Usage: scripts/check-links.py [ROOT]           (exit 1 and one line per broken link)
       scripts/check-links.py --built docs/book
"""
import re
import sys
from pathlib import Path

ROOT = Path(
    sys.argv[1] if len(sys.argv) == 2 else Path(__file__).resolve().parent.parent
).resolve()
BOOK = ROOT / "docs" / "src"

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INCLUDE = re.compile(r"\{\{#include\s+([^}\s]+)\s*\}\}")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """(line number, line) outside fenced code blocks and HTML comments, with inline code
    blanked."""
    text = re.sub(r"<!--.*?-->", lambda c: "\n" * c.group(0).count("\n"), text, flags=re.S)
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip()
        m = re.match(r"(`{3,}|~{3,})", stripped)
        if m:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
                continue
            if stripped.startswith(fence):
                fence = None
                continue
        if fence is None:
            yield n, re.sub(r"(`+)(.+?)\1", lambda c: " " * len(c.group(0)), line)


def slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    out = []
    for ch in text.strip().lower():
        if ch.isalnum() or ch in "_-":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, ids = {}, set()
        fence = False
        for line in path.read_text(encoding="utf-8").split("\n"):
            if re.match(r"\s*(```|~~~)", line):
                fence = not fence
                continue
            m = None if fence else HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                ids.add(base if n == 0 else f"{base}-{n}")
        _anchors[path] = ids
    return _anchors[path]


def chapters():
    summary = BOOK / "SUMMARY.md"
    found = set()
    if summary.exists():
        for _, line in prose_lines(summary.read_text(encoding="utf-8")):
            for m in LINK.finditer(line):
                found.add((BOOK / m.group(1).split("#")[0]).resolve())
    return found


def check_built(out):
    """The rendered book: links inside each page's <main> resolve (files and ids)."""
    import html

    ids_of = {}

    def ids(page):
        if page not in ids_of:
            ids_of[page] = set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))
        return ids_of[page]

    errors, checked = [], 0
    pages = [p for p in sorted(out.rglob("*.html")) if p.name not in ("print.html", "toc.html", "404.html")]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        main = text.split("<main>", 1)[1].split("</main>", 1)[0] if "<main>" in text else ""
        for m in re.finditer(r'(?:href|src)="([^"]+)"', main):
            target = html.unescape(m.group(1))
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue
            checked += 1
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(out)}: {target}"
            if not dest.is_file():
                errors.append(f"{where}: not in the built book")
            elif anchor and dest.suffix == ".html" and anchor not in ids(dest):
                errors.append(f"{where}: no id #{anchor} there")
    for e in errors:
        print(e)
    print(f"checked {checked} links in {len(pages)} built pages: {len(errors)} broken", file=sys.stderr)
    return 1 if errors else 0


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--built":
        return check_built(Path(sys.argv[2]).resolve())
    files = [ROOT / n for n in ("README.md", "ARCHITECTURE.md", "CONTRIBUTING.md") if (ROOT / n).exists()]
    files += sorted(BOOK.rglob("*.md"))
    in_book = chapters()
    errors, checked = [], 0
    for page in files:
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(ROOT)
        is_book = BOOK in page.parents
        for n, line in prose_lines(text):
            for m in INCLUDE.finditer(line):
                if not (page.parent / m.group(1).split(":")[0]).exists():
                    errors.append(f"{rel}:{n}: include {m.group(1)}: no such file")
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                    continue  # http(s), mailto, ...
                checked += 1
                path_part, _, anchor = target.partition("#")
                dest = (page.parent / path_part).resolve() if path_part else page
                where = f"{rel}:{n}: {target}"
                if not dest.exists():
                    errors.append(f"{where}: no such file")
                    continue
                if is_book and path_part:
                    if BOOK not in dest.parents:
                        errors.append(f"{where}: a book page may link only inside docs/src (the built book has nothing else)")
                        continue
                    if dest.is_dir():
                        errors.append(f"{where}: a directory (the built book has no index of it)")
                        continue
                    if dest.name == "README.md":
                        errors.append(f"{where}: mdBook renames a README.md chapter to index.html; name the page otherwise")
                        continue
                    if dest.suffix == ".md" and dest not in in_book:
                        errors.append(f"{where}: not a chapter of docs/src/SUMMARY.md (the built book has no such page)")
                        continue
                if anchor:
                    if dest.suffix != ".md":
                        errors.append(f"{where}: an anchor into a file that is not Markdown")
                    elif anchor not in anchors(dest):
                        errors.append(f"{where}: no heading with id #{anchor} in {dest.relative_to(ROOT)}")
    for e in errors:
        print(e)
    print(f"checked {checked} links in {len(files)} files: {len(errors)} broken", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
