"""CA and serving certificates: issue, store, rotate, inject."""
