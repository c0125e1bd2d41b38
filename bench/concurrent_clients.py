#!/usr/bin/env python3
"""Throughput of a running `deltaflash serve` under N concurrent clients (standard library only).

  bench/concurrent_clients.py PORT CLIENTS MAX_TOKENS

Each client sends one greedy /v1/completions request (code prompts, cycled); prints the
completion tokens of all clients over the wall time from the first request to the last answer.
"""
import json
import sys
import threading
import time
import urllib.request

PROMPTS = ["def read_json(path):\n", "import os\n\n\nclass Config:\n", "def add(a, b):", "for i in range(10):",
           "def fibonacci(n):", "class Stack:\n    def __init__(self):\n", "# Parse dates\nimport datetime\n",
           "def main():\n"]


def main():
    port, n_clients, n_tokens = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    tokens = []
    lock = threading.Lock()

    def client(i):
        body = json.dumps({"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": n_tokens, "temperature": 0}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req) as r:
            n = json.load(r)["usage"]["completion_tokens"]
        with lock:
            tokens.append(n)

    t0 = time.time()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.time() - t0
    print(f"{n_clients} clients: {sum(tokens)} tokens in {dt:.2f} s = {sum(tokens) / dt:.0f} tok/s")


if __name__ == "__main__":
    main()
