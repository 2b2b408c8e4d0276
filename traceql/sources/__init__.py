"""Readers of the profilers' outputs: nsys exports and reports (``nsys``), Nsight Compute reports (``ncu``), and
what every reader needs of an input (``inputs``: hashing, decompression; ``urls``: inputs named by URL)."""
