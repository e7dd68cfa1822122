"""What certificate reloading costs per new TLS connection, and new connections per second.

1. In process: the ``ssl_context`` hook (two stat calls on a cached context) against gunicorn's
   stock hook (a new SSLContext loading the certificate and key on every connection).
2. End to end: the real ``gpushare serve``, one fresh TLS connection per ``GET /healthz``,
   for a few seconds, while ``gpushare certs rotate --force`` renews the certificate every
   second; prints connections/s and failures (there should be none).

    .venv/bin/python bench/tls_reload.py --seconds 5
"""

from __future__ import annotations

import argparse
import http.client
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.processes import free_port, https_server
from webhook.server.tls_reload import ReloadingContext

GPUSHARE = str(Path(sys.executable).parent / "gpushare")


def per_call_us(call, rounds: int) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    for _ in range(rounds):
        call()
    return (time.perf_counter() - start) / rounds * 1e6


def in_process(cert_dir: Path, rounds: int) -> None:
    paths = (str(cert_dir / "tls.crt"), str(cert_dir / "tls.key"))

    def stock() -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*paths)
        return context

    reloader = ReloadingContext()
    cached = per_call_us(lambda: reloader.get(paths, stock), rounds)
    fresh = per_call_us(stock, rounds)
    print(f"context per connection: reloading hook {cached:8.1f} us   stock (load per connection) {fresh:8.1f} us")


def end_to_end(cert_dir: Path, seconds: float) -> None:
    port = free_port()
    command = [GPUSHARE, "serve", "--host", "127.0.0.1", "--port", str(port), "--cert-dir", str(cert_dir)]
    bundle = cert_dir / "ca-bundle.crt"
    with https_server(command, bundle, port, cert_dir.parent / "server.log"):
        stop = threading.Event()
        counts = {"ok": 0, "failed": 0, "rotations": 0}

        def rotate() -> None:
            while not stop.wait(1.0):
                subprocess.run([GPUSHARE, "certs", "rotate", "--cert-dir", str(cert_dir), "--force",
                                "--san", "localhost"], check=True, capture_output=True)
                counts["rotations"] += 1

        rotator = threading.Thread(target=rotate)
        rotator.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            conn = http.client.HTTPSConnection("localhost", port, timeout=10,
                                               context=ssl.create_default_context(cafile=str(bundle)))
            try:
                conn.request("GET", "/healthz")
                ok = conn.getresponse().status == 200
                counts["ok" if ok else "failed"] += 1
            except (OSError, ssl.SSLError):
                counts["failed"] += 1
            finally:
                conn.close()
        stop.set()
        rotator.join()
    rate = counts["ok"] / seconds
    print(f"new TLS connections: {rate:7.1f}/s over {seconds:.0f} s, {counts['rotations']} rotations, "
          f"{counts['failed']} failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = Path(tmp) / "certs"
        subprocess.run([GPUSHARE, "certs", "issue", "--cert-dir", str(cert_dir), "--san", "localhost"], check=True,
                       capture_output=True)
        in_process(cert_dir, args.rounds)
        end_to_end(cert_dir, args.seconds)


if __name__ == "__main__":
    main()
