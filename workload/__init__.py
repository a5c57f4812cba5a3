"""Workload generation: DNN training traffic (parameter server, ring all-reduce). Later issues."""
