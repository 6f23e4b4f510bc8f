"""Build farms from the client side: manifests of kernels, their lock file, and `ane-kernels build`."""
