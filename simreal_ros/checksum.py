"""SHA-256 of policy files: checkpoint weights, adapter store manifests, PolicyUpdate.checksum.

On the ground floor: the checkpoint format and the adapter store (below the policy) both
checksum, and neither imports the other for it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of the file at ``path``, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of bytes already read (what is checked is then what is parsed)."""
    return hashlib.sha256(data).hexdigest()
