"""The engine runtime: an OpenAI-compatible endpoint as a step writer (:mod:`.steps` over
:mod:`.client`), a target and a draft endpoint as a pair (:mod:`.pair`), and llama.cpp's server,
built from source and started on loopback (:mod:`.build`, :mod:`.llamacpp`)."""
