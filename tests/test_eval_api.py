"""``verlog eval --api-base``: a real vLLM OpenAI-compatible server on loopback scores like the local model;
a server that is down or answers garbage ends in one line, keeps the finished episodes, and the same command
resumes. The faults come from a small loopback server (a real vLLM server cannot be told to fail)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from verlog.evaluation.agents import EvalError
from verlog.evaluation.command import evaluate
from verlog.models.tiny import build_tiny
from verlog.sampling import vllm_unavailable
from verlog.sampling.api import ApiSettings

ROOT = Path(__file__).resolve().parents[1]
#: torch.distributed variables an in-process engine sets; a child process must pick its own.
LAUNCH_VARS = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
TASK = "verlog/BabyAI-GoTo-v0"
SET = ["prompt.max_response_tokens=6", "env.memory=none", "env.memory_kwargs={}"]
KW = {"max_episode_steps": 3}


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Flaky(BaseHTTPRequestHandler):
    """Answers "go forward" to the first ``good`` chat requests, then ``bad`` (an HTTP 500 or a garbage body)."""

    good = 0
    bad = "500"
    seen = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        cls = type(self)
        cls.seen += 1
        if cls.seen <= cls.good:
            body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "go forward"}}
            ]}  # fmt: skip
            self._send(200, json.dumps(body).encode())
        elif cls.bad == "500":
            self._send(500, b'{"error": "boom"}')
        else:
            self._send(200, b"<html>not a chat completion</html>")

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _serve(good: int, bad: str) -> tuple[ThreadingHTTPServer, str]:
    handler = type("Handler", (_Flaky,), {"good": good, "bad": bad, "seen": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def _api(url: str, **kw) -> ApiSettings:
    return ApiSettings(base_url=url, model="m", retries=1, backoff=0.01, timeout=10, **kw)


@pytest.mark.parametrize(
    ("bad", "message"), [("500", "HTTP 500 after 2 tries"), ("garbage", "answered garbage")]
)
def test_a_failing_server_keeps_finished_episodes_and_the_same_command_resumes(tmp_path: Path, bad, message):
    out = tmp_path / "eval"
    server, url = _serve(good=5, bad=bad)  # one episode of 3 turns, then trouble mid-way through the second
    try:
        with pytest.raises(EvalError, match=message) as caught:
            evaluate("m", TASK, out=out, episodes=3, num_envs=1, overrides=SET, env_kwargs=KW, api=_api(url))
    finally:
        server.shutdown()
    assert "run the same command again" in str(caught.value) and "1 episodes kept" in str(caught.value)
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 1
    assert "after 2 tries" in json.loads((out / "failures.jsonl").read_text().splitlines()[0])["error"]
    server, url = _serve(good=10**6, bad=bad)
    try:
        summary = evaluate(
            "m", TASK, out=out, episodes=3, num_envs=1, overrides=SET, env_kwargs=KW, api=_api(url)
        )
    finally:
        server.shutdown()
    assert (summary["resumed"], summary["played_now"]) == (1, 2)


def test_a_server_that_is_down_is_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_port()}/v1"  # nothing listens there
    with pytest.raises(
        EvalError, match=r"no answer \(APIConnectionError\) after 2 tries; check that the server"
    ):
        evaluate(
            "m", TASK, out=tmp_path / "e", episodes=1, num_envs=1, overrides=SET, env_kwargs=KW, api=_api(url)
        )


_UNAVAILABLE = vllm_unavailable("cpu")


@pytest.mark.skipif(_UNAVAILABLE is not None, reason=f"vLLM does not run here: {_UNAVAILABLE}")
def test_a_vllm_server_scores_like_the_local_model(tmp_path: Path) -> None:
    """The tiny model served by ``python -m vllm.entrypoints.openai.api_server`` on loopback, evaluated
    greedily through the chat API, plays the same episodes as the same model evaluated locally."""
    model = build_tiny(tmp_path / "tiny", TASK, hidden_size=128, num_heads=2)
    port = _port()
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
        "--port", str(port), "--enforce-eager", "--served-model-name", "tiny", "--max-model-len", "512",
        "--dtype", "float32", "--kv-cache-memory-bytes", str(2**28),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}  # an engine of this process set them
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"})
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the vLLM server did not answer within 300 s"
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5).read()
                break
            except OSError:
                time.sleep(2)
        api = ApiSettings(base_url=f"http://127.0.0.1:{port}/v1", model="tiny", concurrency=4, timeout=60)
        served = evaluate("tiny", TASK, out=tmp_path / "api", episodes=2, num_envs=2, overrides=SET,
                          env_kwargs=KW, api=api)  # fmt: skip
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
        log.close()
    local = evaluate(str(model), TASK, out=tmp_path / "local", episodes=2, num_envs=2, overrides=SET,
                     env_kwargs=KW, device="cpu")  # fmt: skip
    assert served["agent"]["agent"] == "api"

    def actions(folder: Path) -> list[tuple]:
        rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
        return sorted((r["env_id"], r["episode"], r["turn"], r["response"], r["action"]) for r in rows)

    records = {}
    for name in ("api", "local"):
        rows = [json.loads(line) for line in (tmp_path / name / "episodes.jsonl").read_text().splitlines()]
        records[name] = sorted((r["seed"], r["return"], r["length"], r["invalid_actions"]) for r in rows)
    assert records["api"] == records["local"]
    assert served["overall"]["score"] == local["overall"]["score"]
    assert actions(tmp_path / "api") == actions(tmp_path / "local")  # the same answers, turn by turn
    # The same model through the in-process vLLM engine (verlog eval --backend vllm, its own process).
    cli = [sys.executable, "agents/evaluate.py", str(model), "--suite", TASK, "--episodes", "2", "--num-envs", "2",
           "--backend", "vllm", "--out", str(tmp_path / "engine"), "--quiet", "--device", "cpu",
           "--env-kwargs", "{ max_episode_steps = 3 }", *[a for kv in SET for a in ("--set", kv)],
           "--set", "sampling.vllm_cpu_kvcache_gib=0.25"]  # fmt: skip
    done = subprocess.run(cli, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads((tmp_path / "engine" / "settings.json").read_text())["agent"]["sampler"] == "vllm"
    assert actions(tmp_path / "engine") == actions(tmp_path / "local")
