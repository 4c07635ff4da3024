"""Last good TLS pairs: a bad rotation of a Secret in use keeps its previous pair serving.

A certificate Secret rotated to something the engine cannot serve (a key that does not match
the certificate, a truncated PEM, a wrong type) would take every host using it off HTTPS at
once. As the file source keeps a broken file's last good objects, ``LastGoodSecrets`` keeps a
Secret's last good version in the snapshot the translator sees while the newest one is bad,
and says so: a load error naming the Secret (logged, in the status file's ``load_errors``, and a
Warning event ``InvalidObject`` on the Secret in a cluster). The next good version replaces it;
deleting the Secret drops it (a deletion is deliberate).

Only Secrets that once held a good pair are kept; other Secrets pass untouched. The last good
pair lives in this process's memory only: after a restart with just the bad version present
there is nothing to fall back to — the Secret is an error on the objects that name it (their
hosts go without HTTPS, as before), and the load error says that no earlier good pair is known.
Persisting private keys elsewhere (another Secret, a file) to survive that would copy key
material outside the place its owner chose, so it is not done; an adopted Envoy does not help
either, since the first configuration pushed after the restart replaces what it held.

Cost: O(changed Secrets) per update, plus O(Secrets held) while some are held.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from podway.model import Secret
from podway.model.loader import LoadError
from podway.model.snapshot import Key
from podway.sources.base import SourceUpdate
from podway.translate.core.tls import pair_error

log = logging.getLogger(__name__)

KIND = Secret.KIND


class LastGoodSecrets:
    """Follows source updates; ``guard`` returns each one with bad rotations held back."""

    def __init__(self) -> None:
        self._good: dict[Key, Secret] = {}  # the last good version of each TLS Secret seen
        self._held: dict[Key, str] = {}  # Secrets whose newest version is bad → why
        self._unknown: dict[Key, str] = {}  # bad, and no good version known to this process

    def guard(self, update: SourceUpdate) -> SourceUpdate:
        secrets = update.snapshot.kind(Secret)
        if update.changed is None:
            keys = set(secrets) | set(self._good) | set(self._unknown)
        else:
            keys = {key for kind, key in update.changed if kind == KIND}
        for key in keys:
            self._follow(key, secrets.get(key))
        if not self._held and not self._unknown:
            return update
        snapshot = update.snapshot
        if self._held:
            snapshot = snapshot.replace(KIND, {key: self._good[key] for key in self._held})
        errors = [*update.errors]
        for key, why in sorted(self._held.items()):
            errors.append(_error(key, f"{why}; serving its last good certificate and key "
                                      "until a good one replaces it"))
        for key, why in sorted(self._unknown.items()):
            errors.append(_error(key, f"{why}; no earlier good certificate of it is known to "
                                      "this process (last good pairs are kept in memory, not "
                                      "across restarts): the hosts that use it go without "
                                      "HTTPS"))
        return replace(update, snapshot=snapshot, errors=tuple(errors))

    def _follow(self, key: Key, secret: Secret | None) -> None:
        if secret is None:  # deleted: deliberate, nothing to keep
            self._good.pop(key, None)
            self._held.pop(key, None)
            self._unknown.pop(key, None)
            return
        why = pair_error(secret) if secret.type == Secret.TLS_TYPE or key in self._good \
            else None
        if why is None:
            if secret.type == Secret.TLS_TYPE:
                self._good[key] = secret
            if self._held.pop(key, None) is not None:
                log.info("Secret %s/%s holds a good certificate again", *key)
            self._unknown.pop(key, None)
            return
        if key in self._good:
            if self._held.get(key) != why:
                log.warning("Secret %s/%s cannot be served (%s): serving its last good "
                            "certificate and key", *key, why)
            self._held[key] = why
        else:
            self._unknown[key] = why


def _error(key: Key, message: str) -> LoadError:
    namespace, name = key
    return LoadError(file=f"Secret/{namespace}/{name}", document=-1,
                     message=f"Secret {namespace}/{name}: {message}",
                     object=f"Secret/{namespace}/{name}")
