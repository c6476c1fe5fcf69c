"""Serving engines: build and start llama.cpp's server, and drive any OpenAI-compatible endpoint."""
