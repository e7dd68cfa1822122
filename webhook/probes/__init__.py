"""The probe port: a process of its own answering the kubelet's probes (``responder``)."""
