"""recommend's list files (--classes, --behaviour-gate): one reader, one line naming the flag and file on any error."""

import pytest

from kneecap.errors import KneecapError
from kneecap.recommend.classes import load_classes
from kneecap.list_file import read_list_file


def _read(path):
    return read_list_file(path, "--flag", "things", "things", "write a list")


def test_a_list_is_read_bare_under_its_key_and_as_json(tmp_path):
    (tmp_path / "a.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "b.yaml").write_text("things: [x]\nother: 3\n")
    (tmp_path / "c.json").write_text('{"things": [{"k": "\\/"}]}')  # a JSON escape YAML does not know
    assert _read(tmp_path / "a.yaml") == [1, 2]
    assert _read(tmp_path / "b.yaml") == ["x"]
    assert _read(tmp_path / "c.json") == [{"k": "/"}]


@pytest.mark.parametrize(
    "content,needle",
    [
        (None, "cannot read --flag file"),
        (b"\xff\xfe- 1\n", "cannot read --flag file"),
        (b"- [1\n", "does not parse"),
        (b"things: []\n", "holds no list of things"),
        (b"other: [1]\n", "holds no list of things"),
    ],
)
def test_a_bad_list_file_is_one_error_naming_the_flag_and_file(tmp_path, content, needle):
    p = tmp_path / "f.yaml"
    if content is not None:
        p.write_bytes(content)
    with pytest.raises(KneecapError) as e:
        _read(p)
    assert needle in e.value.message and str(p) in e.value.message and "\n" not in e.value.one_line()


def test_a_classes_file_that_is_not_utf8_is_an_error_not_a_traceback(tmp_path):
    p = tmp_path / "classes.yaml"
    p.write_bytes(b'classes:\n  - {input: "\xff", output: 2}\n')
    with pytest.raises(KneecapError, match="cannot read --classes file"):
        load_classes(p)
