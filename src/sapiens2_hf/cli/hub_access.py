"""Before a command looks anything up on the Hugging Face Hub: say so at once, and work offline at once when the Hub
plainly cannot be reached.

Without it a machine without network waits in silence: huggingface_hub retries each failed request with back-off
(about 23 s per file on this project's machines), twice for a pose run (model, then detector), before the error that
`HF_HUB_OFFLINE=1` gives in a second. The check is one DNS lookup of the Hub's host (bounded by `DNS_TIMEOUT_S`); a
lookup that fails outright means no network, so the command runs with `HF_HUB_OFFLINE=1` (the local cache still
serves), saying so. It runs before huggingface_hub is imported: that package reads `HF_HUB_OFFLINE` at import time.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

DNS_TIMEOUT_S = 2.0
# transformers' and huggingface_hub's truthy spellings of HF_HUB_OFFLINE
_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE


def _host_resolves(host: str, timeout: float) -> bool | None:
    """True or False when the lookup answers within `timeout`, None when it does not (slow DNS: not evidence)."""
    answer: list[bool] = []

    def lookup():
        try:
            socket.getaddrinfo(host, 443)
            answer.append(True)
        except OSError:
            answer.append(False)

    thread = threading.Thread(target=lookup, daemon=True)
    thread.start()
    thread.join(timeout)
    return answer[0] if answer else None


def hub_ids(*values: str | None) -> list[str]:
    """The arguments among `values` that will be looked up on the Hub: not empty, not an existing local path."""
    return [value for value in values if value and not Path(value).expanduser().exists()]


def prepare_hub_access(command: str, ids: list[str]) -> None:
    """Announce the Hub lookups of `ids` on stderr, or switch the process offline (with a note) when the Hub's host
    does not resolve. Nothing happens offline or without ids."""
    if not ids or hub_is_offline():
        return
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    names = ", ".join(dict.fromkeys(ids))
    if _host_resolves(host, DNS_TIMEOUT_S) is False:
        os.environ["HF_HUB_OFFLINE"] = "1"
        print(f"sapiens2-hf {command}: the Hugging Face Hub ({host}) cannot be reached (its name does not resolve), "
              f"so {names} is looked up only in the local cache (as with HF_HUB_OFFLINE=1, which skips this check).",
              file=sys.stderr)
        return
    print(f"sapiens2-hf {command}: looking up {names} on the Hugging Face Hub ({host}); set HF_HUB_OFFLINE=1 to use "
          "only local files and the cache.", file=sys.stderr)
