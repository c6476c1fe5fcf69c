"""The layer under the decoding loops: what runs a model (in this process or over HTTP) and what
the machine can do."""
