"""The benchmark scripts' own functions on a few envs, so that a change elsewhere cannot leave a benchmark broken."""
