"""NIXL (P/D disaggregation) workloads for the vLLM 0.15.1 oracle (stdlib only); WIP."""
