"""The one-line-error contract of the CLI itself."""

from __future__ import annotations


def test_unknown_command_is_one_line_exit_2(cli):
    r = cli("no-such-command")
    assert r.code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:")
    assert "Traceback" not in r.stderr


def test_unknown_option_is_one_line_exit_2(cli):
    r = cli("version", "--no-such-flag")
    assert r.code == 2
    assert len(r.stderr.strip().splitlines()) == 1
    assert "--no-such-flag" in r.stderr


def test_version(cli):
    r = cli("version")
    assert r.code == 0
    assert r.stdout.strip()
