"""Plumbing below the routes: reading and limiting bodies, JSON bodies, the auth guards, the
listeners' split, JSON errors, metrics primitives and collectors, request logs, telemetry, the route
table and the guard chain every request runs. Imports policies, documents, state and settings; never
routes or server (tests/domain/test_layout.py)."""
