"""The endpoints: the Flask app (create_app), its Blueprints and the review endpoints in front of
it. Imports http, services, state, documents and policies; never server, dashboard, serving or cli
(tests/domain/test_layout.py)."""
