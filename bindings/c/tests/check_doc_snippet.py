"""A code block of a docs page is byte-identical to the file it shows.

The page marks the block with a comment on the line before its opening fence:
    <!-- snippet: bindings/c/examples/quickstart.c -->
    ```c
    ...the file's text...
    ```
The block's text (between the fences, with its final newline) must equal the file's bytes.
Exits 1 naming the first differing line, or when the marker or the closing fence is missing.

usage: check_doc_snippet.py PAGE.md REPO_ROOT RELATIVE_PATH
"""
import os
import sys


def extract(page_text, rel_path):
    marker = f"<!-- snippet: {rel_path} -->"
    lines = page_text.split("\n")
    for i, line in enumerate(lines):
        if line.strip() == marker:
            if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
                raise ValueError(f"the line after '{marker}' is not an opening ``` fence")
            for j in range(i + 2, len(lines)):
                if lines[j].rstrip() == "```":
                    return "\n".join(lines[i + 2:j]) + "\n"
            raise ValueError(f"the block after '{marker}' has no closing ``` fence")
    raise ValueError(f"no line '{marker}'")


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    page, root, rel = argv[1:]
    with open(page, encoding="utf-8", newline="") as f:
        page_text = f.read()
    with open(os.path.join(root, rel), encoding="utf-8", newline="") as f:
        file_text = f.read()
    try:
        block = extract(page_text, rel)
    except ValueError as e:
        print(f"FAIL: {page}: {e}", file=sys.stderr)
        return 1
    if block != file_text:
        a, b = block.split("\n"), file_text.split("\n")
        for k in range(max(len(a), len(b))):
            x = a[k] if k < len(a) else "<end of block>"
            y = b[k] if k < len(b) else "<end of file>"
            if x != y:
                print(f"FAIL: {page}: the block for {rel} differs from the file at its line "
                      f"{k + 1}:\n  page: {x!r}\n  file: {y!r}", file=sys.stderr)
                return 1
    print(f"check_doc_snippet: {page}'s block is {rel}, byte for byte")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
