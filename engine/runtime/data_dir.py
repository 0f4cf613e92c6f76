"""The worker's data dir: checked before anything is made in it, and the worker's identity kept there."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from engine.errors import ConfigError

if TYPE_CHECKING:
    from engine.settings import Settings


def check_data_dir(settings: Settings) -> None:
    """A data dir that is a file is refused, naming the setting (it is created if missing)."""
    if settings.data_dir.exists() and not settings.data_dir.is_dir():
        raise ConfigError(f"setting 'data_dir' is {str(settings.data_dir)!r}, which is a file; expected "
                          "a directory for the worker's stores (it is created if missing)")


def worker_identity(settings: Settings) -> str:
    """The transactional id of the worker's own sends (timers, sends outside events;
    engine.commit.transactions), kept in the data dir so that a restarted worker fences its predecessor's
    producer and aborts the transaction it left open, instead of waiting for it to time out."""
    folder = settings.app_dir
    path = folder / "worker-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        folder.mkdir(parents=True, exist_ok=True)
        identity = f"{settings.app_id}-{uuid.uuid4().hex[:12]}"
        path.write_text(identity + "\n")
        return identity
