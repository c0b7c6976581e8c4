"""Latency, throughput and accuracy benchmarks with committed results."""
