"""Where the client finds its server and token: the arguments, then STEPLAB_URL and
STEPLAB_TOKEN, then the config file (STEPLAB_CONFIG, else ~/.config/steplab/config.toml);
and what it says when one is missing or the file is bad."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from steplab_client.config import config_write, settings_resolve
from steplab_client.errors import ConfigError


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No STEPLAB_URL or STEPLAB_TOKEN; HOME and STEPLAB_CONFIG unset under ``tmp_path``."""
    monkeypatch.delenv("STEPLAB_URL", raising=False)
    monkeypatch.delenv("STEPLAB_TOKEN", raising=False)
    monkeypatch.delenv("STEPLAB_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_arguments_win_over_the_environment_which_wins_over_the_file(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: a config file in the default place, and the environment
    config_write(url="https://file.example", token="from-file")
    assert (clean_env / ".config" / "steplab" / "config.toml").exists()

    # Then: the file alone
    assert settings_resolve() == settings_resolve(url=None, token=None)
    assert settings_resolve().url == "https://file.example"
    assert settings_resolve().token == "from-file"

    # ...the environment over the file, each value on its own
    monkeypatch.setenv("STEPLAB_TOKEN", "from-env")
    resolved = settings_resolve()
    assert (resolved.url, resolved.token) == ("https://file.example", "from-env")

    # ...the arguments over both; a trailing slash dropped
    resolved = settings_resolve(url="https://arg.example/", token="from-arg")
    assert (resolved.url, resolved.token) == ("https://arg.example", "from-arg")


def test_steplab_config_names_another_file_written_for_its_owner_only(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = clean_env / "elsewhere.toml"
    monkeypatch.setenv("STEPLAB_CONFIG", str(path))

    written = config_write(url='https://lab.example/"quoted"', token="k\\ey")

    assert written == path and stat.S_IMODE(path.stat().st_mode) == 0o600
    resolved = settings_resolve()
    assert (resolved.url, resolved.token) == ('https://lab.example/"quoted"', "k\\ey")


def test_what_is_missing_or_wrong_is_said_in_a_sentence(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="No server URL: pass --url, set STEPLAB_URL"):
        settings_resolve()
    with pytest.raises(ConfigError, match="No API token: set STEPLAB_TOKEN or STEPLAB_TOKEN_FILE"):
        settings_resolve(url="https://lab.example")

    path = clean_env / "bad.toml"
    monkeypatch.setenv("STEPLAB_CONFIG", str(path))
    path.write_text("url = \n")
    with pytest.raises(ConfigError, match="Cannot read .*bad.toml"):
        settings_resolve()
    path.write_text("url = 3\n")
    with pytest.raises(ConfigError, match="`url` must be a string"):
        settings_resolve()
