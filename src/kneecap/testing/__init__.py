"""Helpers the tests (and anyone checking kneecap against a real engine) reuse: a tiny GGUF
writer and a llama.cpp server launcher. Nothing here is imported by the kneecap CLI."""
