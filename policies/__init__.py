"""gpushare-webhook policy domain: pure Python, no HTTP, no network, no kubernetes client."""
