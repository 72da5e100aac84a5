"""The installed ``steplab`` program (``make install`` installs client/ with its console
script), run as a person runs it: ``steplab login`` makes a token from a password and
writes the config file, which later commands read with nothing in the environment."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from annotation.models import ApiToken, Membership, Project, Role
from tests.conftest import IN_CI, REPO_ROOT
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

STEPLAB = Path(sys.executable).parent / "steplab"


def _run(argv: list[str], *, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(STEPLAB), *argv], input=stdin, capture_output=True, text=True, env=env, timeout=120
    )


def test_login_writes_the_config_file_that_later_commands_read(
    live_server: Any, tmp_path: Path
) -> None:
    if not STEPLAB.exists():
        if IN_CI:
            pytest.fail(f"{STEPLAB} is missing: `make install` installs client/")
        pytest.skip("the steplab client is not installed (pip install -e client/)")
    # Given: a lead of a project, and an environment with no token in it
    lead = UserFactory(username="lena")
    project = Project.objects.create(name="Round 1", overlap=1)
    Membership.objects.create(project=project, user=lead, role=Role.LEAD)
    config = tmp_path / "steplab" / "config.toml"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("STEPLAB_URL", "STEPLAB_TOKEN")
    }
    env["STEPLAB_CONFIG"] = str(config)
    # This checkout's client, wherever the installed one's files are.
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "client"), env.get("PYTHONPATH", "")])

    # When: the lead signs in with a password on stdin
    login = _run(
        ["login", "--url", live_server.url, "--username", "lena", "--password-stdin"],
        env=env,
        stdin="pass-1234\n",
    )

    # Then: a token was made and written, readable by the owner only
    assert login.returncode == 0, login.stderr
    assert ApiToken.objects.filter(user=lead).count() == 1
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert f'url = "{live_server.url}"' in config.read_text()

    # ...and the next command finds server and token in the file alone
    listed = _run(["projects", "list", "--json"], env=env)
    assert listed.returncode == 0, listed.stderr
    assert '"name": "Round 1"' in listed.stdout

    # ...while a wrong password is the server's 400, and the file is left as it was
    before = config.read_text()
    wrong = _run(
        ["login", "--url", live_server.url, "--username", "lena", "--password-stdin"],
        env=env,
        stdin="wrong\n",
    )
    assert wrong.returncode == 1 and "HTTP 400" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    assert config.read_text() == before
