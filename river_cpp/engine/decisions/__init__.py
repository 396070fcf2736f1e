"""Decisions made once per file and host, each in one place: which backbone runs a
file, which river pays, how many requests a server batches, the arithmetic of a
drafted round they and the decoding loop share, and loading: the one place the
decisions open the backbone they call for.
"""
