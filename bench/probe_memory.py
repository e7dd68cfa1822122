"""The probe responder's memory: resident set (VmRSS) and peak (VmHWM) of the process that answers
the kubelet's probes (``webhook/probes/responder.py``), idle and after a flood of 256 idle
connections and 2,000 probes; and, beside it, the gunicorn arbiter's and workers' own, which a
look at ``ps`` may take for the responder's.

    .venv/bin/python bench/probe_memory.py

Prints figures; docs/operations.md ("Health probes") quotes them.
"""

from __future__ import annotations

import http.client
import socket
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.processes import children, free_port, https_server, serve_on_loopback

FLOOD_CONNECTIONS = 256  # the responder's MAX_CONNECTIONS
PROBES = 2000


def status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon and RssFile of a process, in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            fields[name] = int(value.split()[0])
    return fields


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        port, ca, command = serve_on_loopback(tmp, pin=False)
        probe_port = free_port()
        with https_server(command, ca, port, Path(tmp, "serve.log"),
                          env={"GPUSHARE_SERVER__PROBE_PORT": str(probe_port)}) as server:
            family = [server.pid, *children(server.pid)]
            processes = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                         for parent in family for pid in [parent, *children(parent)]}
            [responder] = [pid for pid, line in processes.items() if "webhook.probes.responder" in line]
            idle = status(responder)
            held = []
            for _ in range(FLOOD_CONNECTIONS):
                held.append(socket.create_connection(("127.0.0.1", probe_port)))
            for _ in range(PROBES):
                connection = http.client.HTTPConnection("127.0.0.1", probe_port, timeout=5)
                connection.request("GET", "/healthz")
                connection.getresponse().read()
                connection.close()
            flooded = status(responder)
            for sock in held:
                sock.close()
            print(f"probe responder (pid {responder}): idle VmRSS {mib(idle['VmRSS'])} (RssAnon "
                  f"{mib(idle['RssAnon'])}, RssFile {mib(idle['RssFile'])}); after {FLOOD_CONNECTIONS} idle "
                  f"connections and {PROBES} probes VmRSS {mib(flooded['VmRSS'])}, peak VmHWM {mib(flooded['VmHWM'])}")
            for pid, line in processes.items():
                if pid != responder:
                    print(f"  beside it: pid {pid} VmRSS {mib(status(pid)['VmRSS'])}: {line[:90]}")


if __name__ == "__main__":
    main()
