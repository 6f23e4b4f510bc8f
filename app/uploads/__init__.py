"""Uploaded weight tensors: streaming bodies to disk, reading tensor headers, the blob store."""
