"""Where the client finds the server and its token: the arguments first, then the
environment (STEPLAB_URL, STEPLAB_TOKEN, or STEPLAB_TOKEN_FILE naming a file that holds
the token), then a TOML file (STEPLAB_CONFIG, else ~/.config/steplab/config.toml) holding
``url = "..."`` and ``token = "..."``. A token given as an argument on a command line is
in the process list, which every user of the machine reads (``/proc/<pid>/cmdline``); the
environment, a token file and the config file are not.

A token in a file is as good as a password: the file is written readable by its owner
only (``config_write``), and a token is never printed back."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from steplab_client.errors import ConfigError

URL_VARIABLE = "STEPLAB_URL"
TOKEN_VARIABLE = "STEPLAB_TOKEN"
TOKEN_FILE_VARIABLE = "STEPLAB_TOKEN_FILE"
CONFIG_VARIABLE = "STEPLAB_CONFIG"
# What the command line says of its token options.
TOKEN_WARNING = (
    "--token is in the process list, which every user of this machine reads; "
    f"set {TOKEN_VARIABLE}, pass --token-file or run `steplab login` instead"
)
TOKEN_HELP = f"an API token (avoid: {TOKEN_WARNING})"
TOKEN_FILE_HELP = (
    f"a file whose first line is the API token (else {TOKEN_VARIABLE}, then "
    f"{TOKEN_FILE_VARIABLE}, then the config file)"
)


@dataclass(frozen=True)
class Settings:
    url: str
    token: str


def config_path() -> Path:
    """STEPLAB_CONFIG when set, else ~/.config/steplab/config.toml."""
    configured = os.environ.get(CONFIG_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".config" / "steplab" / "config.toml"


def _config_file_values(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"Cannot read {path}: {exc}") from None
    values: dict[str, str] = {}
    for key in ("url", "token"):
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{path}: `{key}` must be a string.")
        values[key] = value
    return values


def token_file_read(path: str) -> str:
    """The token held in the file at ``path`` (its first line, without spaces around)."""
    try:
        lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Cannot read the token file {path}: {exc}") from None
    return lines[0].strip() if lines else ""


def settings_resolve(
    *, url: str | None = None, token: str | None = None, token_file: str | None = None
) -> Settings:
    """The server and token to use: each from the arguments (``token``, else the file
    ``token_file``), else the environment (STEPLAB_TOKEN, else the file STEPLAB_TOKEN_FILE),
    else the config file. A ConfigError names what is missing and where it may be given."""
    path = config_path()
    from_file = _config_file_values(path)
    url = url or os.environ.get(URL_VARIABLE) or from_file.get("url")
    if not token and token_file:
        token = token_file_read(token_file)
    if not token and os.environ.get(TOKEN_VARIABLE):
        token = os.environ[TOKEN_VARIABLE]
    if not token and os.environ.get(TOKEN_FILE_VARIABLE):
        token = token_file_read(os.environ[TOKEN_FILE_VARIABLE])
    token = token or from_file.get("token")
    if not url:
        raise ConfigError(
            f'No server URL: pass --url, set {URL_VARIABLE}, or write `url = "..."` in {path}.'
        )
    if not token:
        raise ConfigError(
            f"No API token: set {TOKEN_VARIABLE} or {TOKEN_FILE_VARIABLE}, pass "
            f'--token-file, or write `token = "..."` in {path} (`steplab login` writes it; '
            "tokens are made on the site's /tokens/ page)."
        )
    return Settings(url=url.rstrip("/"), token=token)


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def config_write(*, url: str, token: str, path: Path | None = None) -> Path:
    """Write ``url`` and ``token`` to the config file, readable by its owner only."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = f"url = {_toml_string(url)}\ntoken = {_toml_string(token)}\n"
    # Created 0600 before the token is written, never world-readable for a moment.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)
    return path
