"""The process above the routes: gunicorn embedding and its workers, the transport, the door,
admission scheduling, TLS reload, the heartbeat. It serves whatever app it is given and learns its
routes from the route table the app hands over (webhook.http.routing); it imports http and may
import routes, never the dashboard, serving or cli (tests/domain/test_layout.py)."""
