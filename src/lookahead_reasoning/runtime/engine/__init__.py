"""The engine runtime: an OpenAI-compatible endpoint as a step writer (:mod:`.steps` over
:mod:`.client`, which speaks each engine's :mod:`.dialects`), a target and a draft endpoint as a pair
(:mod:`.pair`), and the servers this library can start on loopback (:mod:`.process`): llama.cpp's,
built from source (:mod:`.build`, :mod:`.llamacpp`), and vLLM's CPU build, installed into an
environment of its own (:mod:`.vllm`)."""
