"""Steplab's Python client and command line (``steplab``): see ``Client``."""

from steplab_client.client import Client, token_create
from steplab_client.datasets import Download
from steplab_client.errors import ApiError, ConfigError, JobFailed, SteplabError

__version__ = "0.1.0"

__all__ = [
    "ApiError",
    "Client",
    "ConfigError",
    "Download",
    "JobFailed",
    "SteplabError",
    "__version__",
    "token_create",
]
