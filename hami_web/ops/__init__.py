"""Operator tools: ``inspect``, ``explain`` and ``capacity``, read-only, on the scheduler's own rules."""
