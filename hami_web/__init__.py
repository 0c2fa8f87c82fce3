"""hami-web: fractional-GPU (vGPU) admission webhook and kube-scheduler extender, wire-compatible with HAMi."""

__version__ = "0.1.0"
