"""Tensors in files users hand in: .npy / raw / safetensors headers read without loading the bytes (headers), and the one bounded safetensors header reader."""
