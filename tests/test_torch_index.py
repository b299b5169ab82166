"""scripts/torch_index.py: which index `make install` takes torch from, each branch without the network
(a local HTTP server on 127.0.0.1 for an index that answers, a closed port for one that does not)."""

from __future__ import annotations

import http.server
import importlib.util
import socket
import threading

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("torch_index", ROOT / "scripts" / "torch_index.py")
torch_index = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_index)


def no_gpu(name):
    return None


def test_an_override_wins_whatever_the_machine():
    env = {"SSA_TORCH_INDEX": "https://example.invalid/whl/cu128"}
    args, why = torch_index.choose(env, which=lambda n: "/usr/bin/nvidia-smi", reach=lambda u: False)
    assert args == ["--extra-index-url", "https://example.invalid/whl/cu128"] and "SSA_TORCH_INDEX" in why
    assert torch_index.choose({"SSA_TORCH_INDEX": "none"}, which=no_gpu, reach=lambda u: True)[0] == []


def test_a_machine_with_an_nvidia_driver_keeps_pypis_cuda_build():
    asked = []
    args, why = torch_index.choose({}, which=lambda n: "/usr/bin/nvidia-smi", reach=asked.append)
    assert args == [] and "NVIDIA driver is present" in why and asked == []  # no request made


def test_without_a_driver_the_cpu_index_is_taken_when_it_answers_and_skipped_when_not():
    args, why = torch_index.choose({}, which=no_gpu, reach=lambda url: url == torch_index.CPU_INDEX)
    assert args == ["--extra-index-url", torch_index.CPU_INDEX] and "CPU build" in why
    args, why = torch_index.choose({}, which=no_gpu, reach=lambda url: False)
    assert args == [] and "did not answer" in why and "SSA_TORCH_INDEX" in why


@pytest.fixture
def index_server():
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def test_reachable_is_an_answer_within_the_timeout(index_server):
    assert torch_index.reachable(index_server, timeout=5)
    with socket.socket() as s:  # bound, not listening: refused at once (and the port stays ours)
        s.bind(("127.0.0.1", 0))
        assert not torch_index.reachable(f"http://127.0.0.1:{s.getsockname()[1]}/", timeout=5)
    assert not torch_index.reachable("not a url", timeout=5)
