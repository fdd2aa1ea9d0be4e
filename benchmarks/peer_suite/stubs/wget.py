"""peer-suite stub: no downloads here."""
import os

STOOD_IN = {"stories15M-q4_0.gguf"}


def download(url, out=None, **kwargs):
    if out and url.rsplit("/", 1)[-1] in STOOD_IN:
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        os.symlink(os.environ["PEER_SUITE_MODEL"], out)
        return out
    raise RuntimeError("no network: download refused")
