"""Functional core: pure scheduling logic (requests, codecs, scores, fit, choice) with no I/O, clock or locks."""
