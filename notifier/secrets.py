"""Secret references: a token, routing key or signing secret named by an env variable or a file.

Receiver configs never hold a secret inline (a plain string where a secret belongs is a config error),
and :class:`Secret` never shows its value in ``repr``/``str``/logs.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, model_validator

from tailhound.errors import ConfigError


class Secret:
    """A resolved secret value; prints as ``Secret('***')``."""

    __slots__ = ("_value", "origin")

    def __init__(self, value: str, origin: str) -> None:
        self._value = value
        self.origin = origin

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret('***' from {self.origin})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class SecretRef(BaseModel):
    """``{env: SLACK_BOT_TOKEN}`` or ``{file: /run/secrets/slack-token}`` (exactly one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: str | None = None
    file: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_inline(cls, data: object) -> object:
        if isinstance(data, str):
            raise ValueError("secrets are never written inline; use {env: VARIABLE} or {file: /path}")
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("a secret reference needs exactly one of `env` or `file`")
        return self

    def describe(self) -> str:
        return f"env {self.env}" if self.env else f"file {self.file}"

    def resolve(self, environ: dict[str, str] | None = None) -> Secret:
        """Read the secret now; a missing or empty one is a :class:`ConfigError` naming the reference."""
        env = os.environ if environ is None else environ
        if self.env is not None:
            value = env.get(self.env, "")
            if not value:
                raise ConfigError(f"secret {self.describe()} is not set")
            return Secret(value, self.describe())
        assert self.file is not None
        try:
            value = self.file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"secret {self.describe()} cannot be read: {exc.strerror}") from exc
        if not value:
            raise ConfigError(f"secret {self.describe()} is empty")
        return Secret(value, self.describe())
