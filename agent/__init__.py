"""Control plane: loads and attaches BPF programs, installs forwarding state, reads counters."""
