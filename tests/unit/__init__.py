"""Unit tests: no cluster, no framework processes, each file well under a few seconds."""
