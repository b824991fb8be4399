"""Stand-in for nki-library's ``test/utils/scripts/remote_lock_scripts.py`` (not in the published snapshot): core
locks on remote Trainium hosts.  The harness imports ``LockResult`` / ``LockStatus`` at start; simulation mode takes
no lock.  Installed as ``test.utils.scripts.remote_lock_scripts`` by ``trnsim_nkilib_plugin`` when missing."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field


class LockStatus(enum.Enum):
    ALLOCATED = 0
    NO_CORES = 10
    DRAINING = 11
    DRAINED = 12
    UNDRAINED = 13
    RELEASED = 14
    FLOCK_TIMEOUT = 15
    ERROR = 1

    @property
    def exit_code(self):
        return self.value

    @classmethod
    def from_exit_code(cls, rc):
        for s in cls:
            if s.value == rc:
                return s
        return cls.ERROR


@dataclass
class LockResult:
    status: LockStatus
    cores: list = field(default_factory=list)
    max_lock_expiry: float | None = None
    message: str = ""

    @classmethod
    def from_json(cls, text):
        d = json.loads(text)
        return cls(status=LockStatus[d.get("status", "ERROR")], cores=d.get("cores", []),
                   max_lock_expiry=d.get("max_lock_expiry"), message=d.get("message", ""))
