#!/usr/bin/env python3
"""test_layout.py: docs/design.md's "Source code layout" map stays true to the tree.

The map is where a newcomer looks first, so a move that forgets it is a defect: every folder
the map names exists, every module it names exists in that folder (NAME.c, NAME.h or the file
itself; `http*` is a prefix), and every folder of C sources outside the tests is on the map.
No binary is started.
"""
import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "design.md")
# Folders of C sources that are not rooms of the server: the tests and the load kit's own tools.
NOT_ROOMS = ("tests", "load", "build", "deploy", "docs", "scripts", ".git")


def layout_rows():
    """[(path, text)] of the map's table."""
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    m = re.search(r"^### Source code layout\n(.*?)(?=^#)", doc, re.S | re.M)
    if not m:
        raise AssertionError("docs/design.md has no '### Source code layout' section")
    rows = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        rows.append((cells[0].strip("`"), cells[1]))
    return rows


def module_exists(folder, name):
    d = os.path.join(ROOT, folder)
    if name.endswith("*"):
        return any(f.startswith(name[:-1]) for f in os.listdir(d))
    if os.path.splitext(name)[1]:
        return os.path.exists(os.path.join(d, name))
    return any(os.path.exists(os.path.join(d, name + ext)) for ext in (".c", ".h"))


class Layout(unittest.TestCase):
    def test_every_named_folder_exists(self):
        rows = layout_rows()
        self.assertGreater(len(rows), 5, "the map lost its rows")
        for path, _ in rows:
            with self.subTest(path=path):
                self.assertTrue(os.path.isdir(os.path.join(ROOT, path)), f"{path} is on the map but not in the tree")

    def test_every_named_module_exists(self):
        for path, text in layout_rows():
            if path.split("/")[0] in NOT_ROOMS:
                continue
            # Only plain identifiers in backticks are modules (not flags, not `GET /v1/...`).
            for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*\*?(?:\.[ch])?)`", text):
                if name.isupper():  # file names of the data dir (ACKED, WINDOW) are not modules
                    continue
                with self.subTest(folder=path, module=name):
                    self.assertTrue(module_exists(path, name), f"{path}: the map names `{name}`, not found")

    def test_every_source_folder_is_on_the_map(self):
        named = {p.rstrip("/") for p, _ in layout_rows()}
        for dirpath, dirnames, filenames in os.walk(ROOT):
            rel = os.path.relpath(dirpath, ROOT)
            if rel != "." and rel.split(os.sep)[0] in NOT_ROOMS or rel.split(os.sep)[0].startswith("build"):
                dirnames[:] = []
                continue
            if any(f.endswith(".c") for f in filenames):
                with self.subTest(folder=rel):
                    self.assertIn(rel.replace(os.sep, "/"), named, f"{rel} holds C sources but is not on the map")


if __name__ == "__main__":
    unittest.main()
