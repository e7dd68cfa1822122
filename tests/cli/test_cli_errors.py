"""One error style for every usage error, whichever command or group it comes from: one line on
stderr, ``gpushare: error: WHAT (see COMMAND --help)``, exit code 2, the closest command or option
when one is misspelt, no usage block."""

from __future__ import annotations

import pytest

from tests.support.check_helpers import run_gpushare

pytestmark = pytest.mark.processes


@pytest.mark.parametrize(("args", "message"), [
    (["chek", "."], "No such command 'chek'. Did you mean 'check'? (see gpushare --help)"),
    (["xyzzy"], "No such command 'xyzzy'. (see gpushare --help)"),
    (["--bogus"], "No such option '--bogus'. (see gpushare --help)"),
    (["certs", "client"], "Missing argument 'NAME'. (see gpushare certs client --help)"),
    (["certs", "clint"], "No such command 'clint'. Did you mean 'client'? (see gpushare certs --help)"),
    (["policy", "exprt"], "No such command 'exprt'. Did you mean 'export'? (see gpushare policy --help)"),
    (["check", "--outpt", "x"], "No such option '--outpt'. (Did you mean one of: '--also-output', '--output', "
                                "'--output-file'?) "
                                "(see gpushare check --help)"),
    (["check", "--also-output", "sarif", "."], "Invalid value for '--also-output': 'sarif' is not FORMAT:FILE "
                                               "with FORMAT one of text, json, junit, sarif, github, markdown "
                                               "(see gpushare check --help)"),
    (["score", "--nodez", "x"], "No such option '--nodez'. Did you mean '--node'? (see gpushare score --help)"),
])
def test_every_usage_error_is_one_line_in_one_style(args, message):
    done = run_gpushare(*args)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"gpushare: error: {message}\n")


def test_a_group_without_a_command_still_shows_its_help():
    done = run_gpushare("certs")
    assert "Commands:" in done.stdout + done.stderr and "gpushare: error" not in done.stderr
