"""Workloads that traceql runs under the profilers (installed as ``traceql.collectors``)."""
