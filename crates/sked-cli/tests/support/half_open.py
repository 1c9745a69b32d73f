"""Opens N connections to a server that each send half a request line and nothing more, then
times a normal request, then waits and counts how many of the N the server has closed.
Prints one JSON line: {"opened", "normal_ms", "normal_status", "closed", "waited_s"}."""
import json
import resource
import socket
import sys
import time

host, port, n, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 100)), hard))

held = []
for _ in range(n):
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(b"GET /healthz HT")
    held.append(s)

started = time.monotonic()
normal = socket.create_connection((host, port), timeout=5)
normal.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
answer = b""
while True:
    chunk = normal.recv(4096)
    if not chunk:
        break
    answer += chunk
normal_ms = (time.monotonic() - started) * 1000
status = int(answer.split(b" ")[1]) if answer else 0

time.sleep(wait)
closed = 0
for s in held:
    s.settimeout(0.5)
    try:
        closed += s.recv(1) == b""
    except ConnectionResetError:
        closed += 1
    except socket.timeout:
        pass
print(json.dumps({"opened": n, "normal_ms": round(normal_ms, 1), "normal_status": status,
                  "closed": closed, "waited_s": wait}))
