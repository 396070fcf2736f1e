"""Load on `river-cpp serve`: concurrent clients, mixed requests, resident memory
(run by hand, not by CI).

    python scripts/server_load.py [-m MODEL.gguf] [--clients 8] [--requests 25]

Starts the server on a free loopback port (greedy requests, the demo model by default),
computes each client's expected answer with one request of its own first, then runs
the clients at once. Each request is one of: a completion, a streamed completion, a
streamed chat that disconnects after two events, a prompt over the context. Every
answer must be its own prompt's text (greedy, so the same every time), a 400 for the
over-long ones, or a 503 when the queue is full; the server's RSS is printed before
and after.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import socket
import subprocess
import sys
import threading
import time
from collections import Counter


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        line = next(x for x in status if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


MODEL = ["?"]  # the served model's id, read from /v1/models once the server is up


def _post(port: int, path: str, body: dict) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return connection.getresponse()


def _events(response: http.client.HTTPResponse):
    """The JSON payloads of a server-sent event stream, until [DONE]."""
    for raw in response:
        line = raw.decode().strip()
        if line == "data: [DONE]":
            return
        if line.startswith("data: "):
            yield json.loads(line[6:])


def completion(port: int, prompt: str, *, stream: bool, max_tokens: int) -> tuple[int, str]:
    body = {"model": MODEL[0], "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    response = _post(port, "/v1/completions", body)
    if response.status != 200:
        response.read()
        return response.status, ""
    if not stream:
        return 200, json.loads(response.read())["choices"][0]["text"]
    return 200, "".join(event["choices"][0]["text"] for event in _events(response))


def disconnecting_chat(port: int, prompt: str) -> int:
    body = {"model": MODEL[0], "messages": [{"role": "user", "content": prompt}], "max_tokens": 64, "stream": True}
    response = _post(port, "/v1/chat/completions", body)
    if response.status == 200:
        for n, _ in enumerate(_events(response), start=1):
            if n == 2:
                break
    response.close()  # mid-stream: the server must stop this generation
    return response.status


def healthy(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    except OSError:
        return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", help="GGUF (default: the demo model)")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--requests", type=int, default=25)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--n-ctx", type=int, default=512)
    args = p.parse_args()

    port = free_port()
    command = [
        sys.executable,
        "-c",
        "import sys; from river_cpp.apps.cli import main; sys.exit(main(sys.argv[1:]))",
        "serve",
        "--port",
        str(port),
        "-t",
        "2",
        "--n-ctx",
        str(args.n_ctx),
    ] + (["--model", args.model] if args.model else [])
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if healthy(port):
                break
            time.sleep(0.5)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/v1/models")
        MODEL[0] = json.loads(connection.getresponse().read())["data"][0]["id"]
        prompts = [f"Client {i} asks: write a sentence about the number {i * 7 + 3}." for i in range(args.clients)]
        expected = {
            i: completion(port, prompts[i], stream=False, max_tokens=args.max_tokens)[1] for i in range(args.clients)
        }
        too_long = "river " * (args.n_ctx * 2)
        rss_before = rss_mib(server.pid)
        outcomes: Counter = Counter()
        wrong: list[str] = []
        lock = threading.Lock()

        def client(i: int) -> None:
            rng = random.Random(i)
            for _ in range(args.requests):
                kind = rng.choice(["plain", "stream", "disconnect", "too_long"])
                if kind == "disconnect":
                    status, ok = disconnecting_chat(port, prompts[i]), True
                elif kind == "too_long":
                    status, _ = completion(port, too_long, stream=False, max_tokens=4)
                    ok = status in (400, 503)
                else:
                    status, text = completion(port, prompts[i], stream=kind == "stream", max_tokens=args.max_tokens)
                    ok = status == 503 or (status == 200 and text == expected[i])
                with lock:
                    outcomes[(kind, status)] += 1
                    if not ok:
                        wrong.append(f"client {i} {kind}: status {status}")

        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - start
        rss_after = rss_mib(server.pid)
        for (kind, status), n in sorted(outcomes.items()):
            print(f"{kind:10} {status}: {n}")
        print(f"{sum(outcomes.values())} requests in {seconds:.0f} s; wrong answers: {len(wrong)}")
        for line in wrong[:20]:
            print("  " + line)
        print(f"server RSS before {rss_before:.1f} MiB, after {rss_after:.1f} MiB")
        return 1 if wrong else 0
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    raise SystemExit(main())
