"""Verified API keys, remembered for a few seconds so that reads do not each look up their key.

Entries are keyed by the sha256 of the secret (the secret itself is never kept) and hold the
principal the database returned. A key revoked through this process is forgotten at once; a
server process that did not handle the revocation keeps accepting the key for at most
``ttl_seconds`` (``RECYCLE_API_KEY_CACHE_SECONDS``; 0 turns the cache off).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from app.auth.service import Principal


class VerifiedKeyCache:
    def __init__(
        self,
        ttl_seconds: float,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self.clock = clock
        self._entries: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()

    def get(self, secret_hash: str) -> Principal | None:
        entry = self._entries.get(secret_hash)
        if entry is None:
            return None
        principal, expires_at = entry
        if self.clock() >= expires_at:
            with self._lock:
                self._entries.pop(secret_hash, None)
            return None
        return principal

    def put(self, secret_hash: str, principal: Principal) -> None:
        if self.ttl_seconds <= 0:
            return
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()  # many distinct keys at once: start over rather than grow
            self._entries[secret_hash] = (principal, self.clock() + self.ttl_seconds)

    def forget_key(self, key_id: int) -> None:
        with self._lock:
            for secret_hash in [h for h, (p, _) in self._entries.items() if p.key_id == key_id]:
                del self._entries[secret_hash]
