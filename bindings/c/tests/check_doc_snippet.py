"""A code block of a docs page is byte-identical to the file (or the region of a file) it shows.

The page marks the block with a comment on the line before its opening fence:
    <!-- snippet: bindings/c/examples/quickstart.c -->         the whole file
    <!-- snippet: docs/snippets/comm_basics.cc region -->      the file's region
    <!-- snippet: docs/snippets/comm_basics.cc region NAME --> the file's region NAME
    ```cpp
    ...the file's text...
    ```
The block's text (between the fences, with its final newline) must equal the file's bytes, or
the lines strictly between the file's `// [snippet]` (`// [snippet NAME]`) line and the next
`// [end snippet]` line, with the start marker's indentation removed from each of them (so a
region inside a function shows at column 0). A region may have several such spans (setup the
page leaves out sits between them): they are joined in file order and all dedented by the
first start marker's indentation. Exits 1 naming the first differing line, or when
a marker, a region or a closing fence is missing.

usage:
  check_doc_snippet.py PAGE.md REPO_ROOT RELATIVE_PATH
      every block of PAGE marked with RELATIVE_PATH (whole file or regions) matches
  check_doc_snippet.py --all REPO_ROOT [SNIPPET_CMAKELISTS]
      docs.all_snippets_covered: every ```c / ```cpp / ```c++ block of docs/*.md and README.md
      has a marker, and every marked block matches its file; with SNIPPET_CMAKELISTS, every
      marked file docs/snippets/NAME.cc has its braid_doc_snippet(NAME ...) there (so a test
      builds and runs it)
  check_doc_snippet.py --self-test
"""
import glob
import os
import re
import sys

CODE_LANGS = {"c", "cpp", "c++"}
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(\S+)(?:\s+(region)(?:\s+(\S+))?)?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```\s*(\S*)\s*$")


def blocks(page_text):
    """Every fenced block of a page: (line number of its opening fence, language, marker line or
    None, body text with its final newline). Raises ValueError on an unclosed fence."""
    lines = page_text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        for j in range(i + 1, len(lines)):
            if FENCE.match(lines[j]) and lines[j].strip() == "```":
                break
        else:
            raise ValueError(f"the block opened at line {i + 1} has no closing ``` fence")
        marker = lines[i - 1] if i > 0 and MARKER.match(lines[i - 1]) else None
        body = "\n".join(lines[i + 1:j]) + "\n" if j > i + 1 else ""
        out.append((i + 1, m.group(2), marker, body))
        i = j + 1
    return out


def region(file_text, name, rel):
    """The lines between each `// [snippet NAME]` line and the next `// [end snippet]`, the spans
    joined in file order, dedented by the first start marker's indentation."""
    start_tag = "// [snippet]" if name is None else f"// [snippet {name}]"
    lines = file_text.split("\n")
    starts = [k for k, line in enumerate(lines) if line.strip() == start_tag]
    if not starts:
        raise ValueError(f"{rel} has no line '{start_tag}'")
    first = lines[starts[0]]
    indent = first[:len(first) - len(first.lstrip())]
    out = []
    for s in starts:
        for e in range(s + 1, len(lines)):
            if lines[e].strip() == "// [end snippet]":
                break
            if lines[e].strip().startswith("// [snippet"):
                raise ValueError(f"{rel}: '{start_tag}' at line {s + 1} has another snippet "
                                 f"start at line {e + 1} before its '// [end snippet]'")
        else:
            raise ValueError(f"{rel}: '{start_tag}' at line {s + 1} has no '// [end snippet]'")
        for k in range(s + 1, e):
            line = lines[k]
            if line.strip() == "":
                out.append("")
            elif line.startswith(indent):
                out.append(line[len(indent):])
            else:
                raise ValueError(f"{rel}: line {k + 1} of '{start_tag}' is indented less than "
                                 f"the first marker ({len(indent)} spaces)")
    return "\n".join(out) + "\n"


def expected_text(root, marker_line):
    """(relative path, the text a block with this marker must hold)."""
    m = MARKER.match(marker_line)
    rel, is_region, name = m.group(1), m.group(2), m.group(3)
    with open(os.path.join(root, rel), encoding="utf-8", newline="") as f:
        file_text = f.read()
    return rel, (region(file_text, name, rel) if is_region else file_text)


def compare(page, label, block, expected):
    """None when equal, else a message naming the first differing line."""
    if block == expected:
        return None
    a, b = block.split("\n"), expected.split("\n")
    for k in range(max(len(a), len(b))):
        x = a[k] if k < len(a) else "<end of block>"
        y = b[k] if k < len(b) else "<end of file>"
        if x != y:
            return (f"{page}: the block for {label} differs from the file at its line {k + 1}:\n"
                    f"  page: {x!r}\n  file: {y!r}")
    return f"{page}: the block for {label} differs from the file"


def check_page(page, root, only_rel=None):
    """(number of marked blocks checked, failure messages)."""
    with open(page, encoding="utf-8", newline="") as f:
        page_text = f.read()
    found, failures = 0, []
    for line_no, _, marker, body in blocks(page_text):
        if marker is None:
            continue
        rel = MARKER.match(marker).group(1)
        if only_rel is not None and rel != only_rel:
            continue
        found += 1
        label = marker.strip()[len("<!--"):-len("-->")].strip()
        try:
            _, expected = expected_text(root, marker)
        except (OSError, ValueError) as e:
            failures.append(f"{page}:{line_no}: {e}")
            continue
        msg = compare(f"{page}:{line_no}", label, body, expected)
        if msg:
            failures.append(msg)
    return found, failures


def pages(root):
    return sorted(glob.glob(os.path.join(root, "docs", "*.md"))) + [os.path.join(root, "README.md")]


def check_all(root, cmakelists=None):
    listed = None
    if cmakelists:
        with open(cmakelists, encoding="utf-8") as f:
            listed = f.read()
    failures, checked = [], 0
    for page in pages(root):
        rel_page = os.path.relpath(page, root)
        with open(page, encoding="utf-8", newline="") as f:
            text = f.read()
        try:
            page_blocks = blocks(text)
        except ValueError as e:
            failures.append(f"{rel_page}: {e}")
            continue
        for line_no, lang, marker, _ in page_blocks:
            if lang.lower() in CODE_LANGS and marker is None:
                failures.append(
                    f"{rel_page}:{line_no}: a ```{lang} block with no '<!-- snippet: FILE [region "
                    f"[NAME]] -->' line before it: put the code in a file that is built and run "
                    f"(docs/snippets/, docs/layout.md \"Code in the docs\")")
            if marker is not None and listed is not None:
                rel = MARKER.match(marker).group(1)
                stem = os.path.splitext(os.path.basename(rel))[0]
                if rel.startswith("docs/snippets/") and not re.search(
                        r"\bbraid_doc_snippet\(\s*" + re.escape(stem) + r"\s", listed):
                    failures.append(f"{rel_page}:{line_no}: {rel} is not named in {cmakelists}, "
                                    f"so no test builds or runs it")
        n, f = check_page(page, root)
        checked += n
        failures += [x.replace(page, rel_page, 1) for x in f]
    for msg in failures:
        print(f"FAIL: {msg}", file=sys.stderr)
    if failures:
        return 1
    print(f"check_doc_snippet: all {checked} marked blocks of docs/*.md and README.md match their "
          f"files, and every C / C++ block is marked")
    return 0


def self_test():
    src = ("int main() {\n  int x = 0;\n  // [snippet]\n  x += 1;\n\n  if (x) {\n    x = 2;\n  }\n"
           "  // [end snippet]\n  // [snippet two]\n  return x;\n  // [end snippet]\n}\n")
    assert region(src, None, "f") == "x += 1;\n\nif (x) {\n  x = 2;\n}\n", region(src, None, "f")
    assert region(src, "two", "f") == "return x;\n"
    spans = "// [snippet]\n#include <a>\nint main() {\n  // [end snippet]\n  setup();\n" \
            "  // [snippet]\n  run();\n  // [end snippet]\n}\n"
    assert region(spans, None, "f") == "#include <a>\nint main() {\n  run();\n", region(spans, None, "f")
    for bad, why in [("// [snippet]\nx\n", "no '// [end snippet]'"),
                     ("x\n", "no line"),
                     ("  // [snippet]\nx\n  // [end snippet]\n", "indented less"),
                     ("// [snippet]\n// [snippet]\n// [end snippet]\n", "another snippet")]:
        try:
            region(bad, None, "f")
            raise AssertionError(f"no error for {bad!r}")
        except ValueError as e:
            assert why in str(e), (why, str(e))
    page = ("text\n<!-- snippet: a.cc region -->\n```cpp\nx += 1;\n```\n\n```cpp\nloose\n```\n"
            "```sh\nls\n```\n")
    b = blocks(page)
    assert [(n, lang, m is not None, body) for n, lang, m, body in b] == [
        (3, "cpp", True, "x += 1;\n"), (7, "cpp", False, "loose\n"), (10, "sh", False, "ls\n")], b
    assert MARKER.match("<!-- snippet: a.cc region two -->").group(3) == "two"
    assert MARKER.match("<!-- snippet: a.cc -->").group(2) is None
    assert compare("p", "a", "x\ny\n", "x\nz\n").endswith("line 2:\n  page: 'y'\n  file: 'z'")
    try:
        blocks("```cpp\nx\n")
        raise AssertionError("no error for an unclosed fence")
    except ValueError as e:
        assert "no closing" in str(e)
    print("check_doc_snippet: self-test passed")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) in (3, 4) and argv[1] == "--all":
        return check_all(argv[2], argv[3] if len(argv) == 4 else None)
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    page, root, rel = argv[1:]
    found, failures = check_page(page, root, rel)
    if found == 0:
        failures.append(f"{page}: no line '<!-- snippet: {rel} -->' (or '... region ...') before "
                        f"a code block")
    for msg in failures:
        print(f"FAIL: {msg}", file=sys.stderr)
    if failures:
        return 1
    print(f"check_doc_snippet: {page}'s block is {rel}, byte for byte")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
