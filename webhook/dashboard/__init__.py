"""``gpushare dashboard``: a read-only web page over the cluster state, served on 127.0.0.1."""
