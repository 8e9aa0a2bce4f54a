"""Speed benchmarks: throughput of the envs, GAE, rollout, update and replay, and the GPU check."""
