"""Input discovery and hygiene: ordering, ids, manifests, duplicates, paths escaping the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.batch.inputs import (
    DUPLICATE_ID,
    MALFORMED_ROW,
    MISSING_PATH,
    NOT_AN_IMAGE,
    PATH_OUTSIDE_ROOT,
    InputError,
    discover,
    discover_folder,
    discover_manifest,
)


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    return path


def test_folder_is_recursive_sorted_and_ids_are_relative_posix_paths(tmp_path: Path) -> None:
    for rel in ("b.png", "a/z.JPG", "a/b/c.jpeg", "A.tif", ".hidden.png", "readme.txt", "a/x.pdf"):
        _touch(tmp_path / rel)
    _touch(tmp_path / ".git" / "config.png")  # hidden folders are not scanned
    source = discover_folder(tmp_path)
    assert [it.id for it in source.items] == ["A.tif", "a/b/c.jpeg", "a/x.pdf", "a/z.JPG", "b.png", "readme.txt"]
    assert [it.index for it in source.items] == [0, 1, 2, 3, 4, 5]
    images = [it for it in source.items if it.id not in ("a/x.pdf", "readme.txt")]
    assert all(it.error is None and it.file is not None and it.file.is_file() for it in images)
    # files that are not images are reported as error rows, never dropped silently (and never read)
    skipped = {it.id: it for it in source.items if it.error is not None}
    assert set(skipped) == {"a/x.pdf", "readme.txt"}
    assert all(it.error.kind == NOT_AN_IMAGE and it.file is None for it in skipped.values())  # type: ignore[union-attr]
    assert skipped["a/x.pdf"].error.text() == (  # type: ignore[union-attr]
        "not-an-image: skipped: .pdf suffix is not an image type (.jpeg, .jpg, .png, .tif, .tiff, .bmp, .webp, .dcm)")
    assert source.description == f"folder:{tmp_path.resolve()}"


def test_folder_symlink_leaving_the_root_becomes_an_error_row(tmp_path: Path) -> None:
    outside = _touch(tmp_path / "outside" / "secret.png")
    root = tmp_path / "in"
    _touch(root / "ok.png")
    os.symlink(outside, root / "link.png")
    items = {it.id: it for it in discover_folder(root).items}
    assert items["ok.png"].error is None
    err = items["link.png"].error
    assert err is not None and err.kind == PATH_OUTSIDE_ROOT and items["link.png"].file is None


def test_missing_folder_or_unknown_input_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        discover(tmp_path / "nope")
    (tmp_path / "list.txt").write_text("a\n")
    with pytest.raises(InputError, match=r"neither a folder nor a \.csv manifest"):
        discover(tmp_path / "list.txt")


def test_manifest_default_columns_and_relative_resolution(tmp_path: Path) -> None:
    _touch(tmp_path / "imgs" / "1.png")
    _touch(tmp_path / "imgs" / "2.png")
    manifest = tmp_path / "m.csv"
    manifest.write_text("path,grade\nimgs/1.png,0\nimgs/2.png,3\n")
    source = discover(manifest)
    assert [(it.id, it.path) for it in source.items] == [
        ("imgs/1.png", str(tmp_path / "imgs/1.png")), ("imgs/2.png", str(tmp_path / "imgs/2.png"))]
    assert source.items[1].file == tmp_path / "imgs" / "2.png"
    # 'image' is preferred over 'path' when both exist
    manifest.write_text("image,path\nimgs/2.png,imgs/1.png\n")
    assert discover(manifest).items[0].id == "imgs/2.png"


def test_eyepacs_layout_with_extensionless_names_and_image_root(tmp_path: Path) -> None:
    _touch(tmp_path / "train" / "10_left.jpeg")
    manifest = tmp_path / "trainLabels.csv"
    manifest.write_text("image,level\n10_left,0\n")
    [item] = discover(manifest, image_root=tmp_path / "train").items
    assert item.id == "10_left" and item.file == tmp_path / "train" / "10_left.jpeg" and item.error is None


def test_missing_column_names_the_file_and_the_expected_columns(tmp_path: Path) -> None:
    manifest = tmp_path / "labels.csv"
    manifest.write_text("filename,level\na.png,1\n")
    with pytest.raises(InputError) as info:
        discover(manifest)
    message = str(info.value)
    assert str(manifest) in message and "'image' or 'path'" in message and "'filename'" in message
    with pytest.raises(InputError, match=r"no id column: expected 'patient'"):
        discover(manifest, path_column="filename", id_column="patient")


def test_duplicates_escapes_and_empty_cells_become_error_rows(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _touch(root / "a.png")
    _touch(root / "b.png")
    outside = _touch(tmp_path / "elsewhere.png")
    manifest = root / "m.csv"
    manifest.write_text(
        "id,image\n"
        "p1,a.png\n"          # line 2: ok
        "p2,../elsewhere.png\n"  # line 3: escapes via ..
        f"p3,{outside}\n"     # line 4: absolute path outside the root
        f"p4,{root / 'b.png'}\n"  # line 5: absolute path inside the root: fine
        "p1,b.png\n"          # line 6: duplicate id of line 2
        "p5,\n"               # line 7: empty path
    )
    items = discover_manifest(manifest, id_column="id").items
    assert len(items) == 6  # every row accounted for
    kinds = [it.error.kind if it.error else None for it in items]
    assert kinds == [None, PATH_OUTSIDE_ROOT, PATH_OUTSIDE_ROOT, None, DUPLICATE_ID, MISSING_PATH]
    assert items[4].error is not None and "line 6 duplicates line 2" in items[4].error.detail
    assert items[1].error is not None and "line 3" in items[1].error.detail
    assert items[4].error.text().startswith("duplicate-id: ")


def test_broken_csv_rows_are_named_by_their_real_lines_and_never_swallow_rows_silently(tmp_path: Path) -> None:
    """An unbalanced quote makes the csv module read every following line into one field, and a blank
    line shifts any line count made from the row index: both are reported against the file's own lines."""
    root = tmp_path / "data"
    for name in ("a.png", "b.png", "c.png", "d.png"):
        _touch(root / name)
    manifest = root / "m.csv"
    manifest.write_text(
        "id,image\n"
        "p1,a.png\n"             # line 2: ok
        "\n"                     # line 3: blank (skipped by the reader)
        "p1,b.png\n"             # line 4: duplicate of line 2 -- reported as line 4, not 3
        "p2,b.png,extra\n"       # line 5: one cell too many (an unquoted comma)
        "p3,c.png\n"             # line 6: ok
        'p4,"d.png\n'            # line 7: the quote never closes ...
        "p5,a.png\n"             # line 8: ... so this line is swallowed into p4's path
    )
    items = discover_manifest(manifest, id_column="id").items
    kinds = [it.error.kind if it.error else None for it in items]
    assert kinds == [None, DUPLICATE_ID, MALFORMED_ROW, None, MALFORMED_ROW]
    assert [it.id for it in items] == ["p1", "p1", "p2", "p3", "p4"]
    details = [it.error.detail if it.error else "" for it in items]
    assert "line 4 duplicates line 2" in details[1]
    assert details[2] == ("line 5 has 3 cells but the header has 2 (an unquoted comma in a path or id?) in m.csv; "
                          "the row is not scored")
    assert details[4] == ("a quoted field opened on line 7 runs to line 8, so lines 7-8 were read as one row "
                          "(an unbalanced quote?) in m.csv; the row is not scored")
    assert items[3].file == root / "c.png"
    # a quote that closes further down swallows the lines between, and is named the same way
    manifest.write_text('id,image\np1,"a.png\np2,b.png\np3,c".png\np4,d.png\n')
    items = discover_manifest(manifest, id_column="id").items
    assert [(it.id, it.error.kind if it.error else None) for it in items] == [("p1", MALFORMED_ROW), ("p4", None)]
    assert items[0].error is not None and "opened on line 2 runs to line 4, so lines 2-4" in items[0].error.detail
