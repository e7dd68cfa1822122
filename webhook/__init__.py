"""gpushare-webhook HTTP edge: Flask app, AdmissionReview I/O, cluster state sources, CLI."""
