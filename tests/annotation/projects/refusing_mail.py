"""E-mail backends for the invitation tests: one whose server refuses some addresses, one
whose server cannot be reached. Messages that go are kept in django.core.mail.outbox, as
Django's in-memory backend keeps them."""

from __future__ import annotations

import smtplib
from collections.abc import Sequence
from typing import Any

from django.core import mail
from django.core.mail.backends.base import BaseEmailBackend


class RefusingBackend(BaseEmailBackend):
    """Refuses every address that starts with "refused"."""

    def send_messages(self, email_messages: Sequence[Any]) -> int:
        for message in email_messages:
            refused = [a for a in message.recipients() if a.startswith("refused")]
            if refused:
                raise smtplib.SMTPRecipientsRefused({a: (550, b"No such user") for a in refused})
            mail.outbox.append(message)  # type: ignore[attr-defined]
        return len(email_messages)


class UnreachableBackend(BaseEmailBackend):
    def open(self) -> bool:
        raise ConnectionRefusedError(111, "Connection refused")

    def send_messages(self, email_messages: Sequence[Any]) -> int:
        raise AssertionError("no message is sent without a connection")
