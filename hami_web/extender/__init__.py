"""The scheduler extender's shell: decode kube-scheduler's requests, call the cache, patch pods, bind."""
