"""What the endpoints and the dashboard answer, without HTTP: the dry run of manifests
(``dry_run``). Imports policies, documents and settings; never http, routes, server, the dashboard
or Flask (tests/domain/test_layout.py)."""
