"""peer-suite plugin: requests reach this machine only."""
from urllib.parse import urlsplit

import requests

_request = requests.Session.request


def _loopback_only(self, method, url, *args, **kwargs):
    if urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1"):
        raise RuntimeError(f"no network: download refused ({url})")
    return _request(self, method, url, *args, **kwargs)


requests.Session.request = _loopback_only
