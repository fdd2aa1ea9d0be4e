"""/metrics' Process-Start-Time-Unix header goes out spelled as llama-server spells it (issue 36; llama.cpp's
test_metrics.py copies the headers into a plain dict and looks it up by that spelling). HTTP names are
case-insensitive, but Starlette lowercases the names it is given, so the spelling is kept on purpose."""
from __future__ import annotations

import http.client
import time

import pytest

from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)


def test_the_start_time_header_keeps_llama_servers_spelling(model_path) -> None:
    with ServerProcess(["--model", str(model_path), "--parallel", "1", "--n-ctx", "256", "--threads", "2"]) as srv:
        connection = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        connection.request("GET", "/metrics")
        answer = connection.getresponse()
        names = dict(answer.getheaders())  # (as sent on the wire)
        answer.read()
        connection.close()
    assert answer.status == 200
    assert abs(int(names["Process-Start-Time-Unix"]) - time.time()) < 600
    assert "process-start-time-unix" not in names  # (sent once)
